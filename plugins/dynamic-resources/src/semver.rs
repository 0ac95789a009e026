//! Semantic versions (semver 2.0.0) as kube's `semver` CEL library compares them: by major,
//! minor and patch, then a pre-release below the release, identifiers compared numerically or
//! by text; build metadata is ignored.

use std::cmp::Ordering;

/// A parsed semantic version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Semver {
    /// Major, minor and patch.
    pub core: [u64; 3],
    /// The pre-release identifiers (empty for a release).
    pub pre: Vec<String>,
}

impl Semver {
    /// Parses `major.minor.patch[-pre][+build]`, strictly (no leading zeros, no missing part).
    pub fn parse(text: &str) -> Result<Semver, String> {
        let invalid = || format!("invalid semver: {text}");
        let (rest, build) = text.split_once('+').unwrap_or((text, ""));
        let (core, pre) = match rest.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (rest, None),
        };
        let numeric = |part: &str| -> Option<u64> {
            let valid = !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_digit())
                && !(part.len() > 1 && part.starts_with('0'));
            valid.then(|| part.parse().ok()).flatten()
        };
        let parts: Vec<&str> = core.split('.').collect();
        let [major, minor, patch] = parts[..] else {
            return Err(invalid());
        };
        let core = [
            numeric(major).ok_or_else(invalid)?,
            numeric(minor).ok_or_else(invalid)?,
            numeric(patch).ok_or_else(invalid)?,
        ];
        let pre: Vec<String> = match pre {
            None => Vec::new(),
            Some(pre) => pre.split('.').map(str::to_string).collect(),
        };
        let identifier_ok = |id: &String| {
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        let numeric_ok =
            |id: &String| !id.bytes().all(|b| b.is_ascii_digit()) || numeric(id).is_some();
        if !pre.iter().all(|id| identifier_ok(id) && numeric_ok(id)) {
            return Err(invalid());
        }
        if !build.is_empty() && !build.split('.').all(|id| identifier_ok(&id.to_string())) {
            return Err(invalid());
        }
        Ok(Semver { core, pre })
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Self) -> Ordering {
        self.core
            .cmp(&other.core)
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let order = match (a.parse::<u64>(), b.parse::<u64>()) {
                            (Ok(a), Ok(b)) => a.cmp(&b),
                            (Ok(_), Err(_)) => Ordering::Less,
                            (Err(_), Ok(_)) => Ordering::Greater,
                            (Err(_), Err(_)) => a.cmp(b),
                        };
                        if order != Ordering::Equal {
                            return order;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            })
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_as_semver_2() {
        let v = |t: &str| Semver::parse(t).unwrap();
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.2.0",
            "1.10.0",
            "2.0.0",
        ];
        for pair in ordered.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(v("1.0.0+build.1").cmp(&v("1.0.0")), Ordering::Equal);
        for bad in ["1.0", "01.0.0", "1.0.0-", "1.0.0-01", "a.b.c", "1.0.0.0"] {
            assert!(Semver::parse(bad).is_err(), "{bad}");
        }
    }
}
