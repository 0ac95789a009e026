//! The encoding of Dynamic Resource Allocation's data (the `devices` interface of
//! `wit/plugin.wit`): a node's device pools after its `node-info`, and the pod's claims as part
//! bit 14.

use super::{Decoded, Reader, WireError, Writer};
use crate::{
    AllocationMode, AttributeValue, ClaimAllocated, Device, DeviceConstraint, DevicePool,
    DeviceRequest, PodClaim,
};

impl Writer<'_> {
    pub(super) fn device_pools(&mut self, pools: &[DevicePool]) {
        self.list(pools, |w, pool| {
            w.str(&pool.driver);
            w.str(&pool.name);
            w.bool(pool.complete);
            w.list(&pool.devices, Self::device);
        });
    }

    fn device(&mut self, device: &Device) {
        self.str(&device.name);
        self.list(&device.attributes, |w, (name, value)| {
            w.str(name);
            match value {
                AttributeValue::Int(v) => {
                    w.u8(0);
                    w.i64(*v);
                }
                AttributeValue::Bool(v) => {
                    w.u8(1);
                    w.bool(*v);
                }
                AttributeValue::String(v) => {
                    w.u8(2);
                    w.str(v);
                }
                AttributeValue::Version(v) => {
                    w.u8(3);
                    w.str(v);
                }
            }
        });
        self.list(&device.capacity, |w, (name, value)| {
            w.str(name);
            w.str(value);
        });
        self.bool(device.allocated);
    }

    pub(super) fn pod_claim(&mut self, claim: &PodClaim) {
        self.str(&claim.name);
        self.str(&claim.claim_name);
        self.bool(claim.from_template);
        self.bool(claim.found);
        self.bool(claim.deleting);
        self.bool(claim.owned_by_other);
        self.option(claim.allocated.as_ref(), |w, a| {
            w.option(a.node_selector.as_ref(), |w, terms| w.terms(terms));
            w.bool(a.reserved_for_pod);
            w.u32(a.reserved_count);
        });
        self.list(&claim.requests, Self::device_request);
        self.list(&claim.constraints, |w, c| {
            w.strs(&c.requests);
            w.str(&c.match_attribute);
        });
    }

    fn device_request(&mut self, request: &DeviceRequest) {
        self.str(&request.name);
        self.str(&request.class_name);
        self.bool(request.class_found);
        self.strs(&request.class_selectors);
        self.strs(&request.selectors);
        match request.mode {
            AllocationMode::ExactCount(count) => {
                self.u8(0);
                self.u32(count);
            }
            AllocationMode::All => self.u8(1),
        }
        self.bool(request.admin_access);
        self.list(&request.first_available, Self::device_request);
    }
}

impl Reader<'_> {
    pub(super) fn device_pools(&mut self) -> Decoded<Vec<DevicePool>> {
        self.list(|r| {
            Ok(DevicePool {
                driver: r.string()?,
                name: r.string()?,
                complete: r.bool()?,
                devices: r.list(Self::device)?,
            })
        })
    }

    fn device(&mut self) -> Decoded<Device> {
        Ok(Device {
            name: self.string()?,
            attributes: self.list(|r| {
                let name = r.string()?;
                let value = match r.u8()? {
                    0 => AttributeValue::Int(r.i64()?),
                    1 => AttributeValue::Bool(r.bool()?),
                    2 => AttributeValue::String(r.string()?),
                    3 => AttributeValue::Version(r.string()?),
                    tag => return Err(WireError(format!("attribute value tag {tag}"))),
                };
                Ok((name, value))
            })?,
            capacity: self.list(|r| Ok((r.string()?, r.string()?)))?,
            allocated: self.bool()?,
        })
    }

    pub(super) fn pod_claim(&mut self) -> Decoded<PodClaim> {
        Ok(PodClaim {
            name: self.string()?,
            claim_name: self.string()?,
            from_template: self.bool()?,
            found: self.bool()?,
            deleting: self.bool()?,
            owned_by_other: self.bool()?,
            allocated: self.option(|r| {
                Ok(ClaimAllocated {
                    node_selector: r.option(Self::terms)?,
                    reserved_for_pod: r.bool()?,
                    reserved_count: r.u32()?,
                })
            })?,
            requests: self.list(Self::device_request)?,
            constraints: self.list(|r| {
                Ok(DeviceConstraint {
                    requests: r.strings()?,
                    match_attribute: r.string()?,
                })
            })?,
        })
    }

    fn device_request(&mut self) -> Decoded<DeviceRequest> {
        Ok(DeviceRequest {
            name: self.string()?,
            class_name: self.string()?,
            class_found: self.bool()?,
            class_selectors: self.strings()?,
            selectors: self.strings()?,
            mode: match self.u8()? {
                0 => AllocationMode::ExactCount(self.u32()?),
                1 => AllocationMode::All,
                tag => return Err(WireError(format!("allocation mode tag {tag}"))),
            },
            admin_access: self.bool()?,
            first_available: self.list(Self::device_request)?,
        })
    }
}
