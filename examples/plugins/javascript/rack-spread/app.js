// RackSpread: spread pods over racks, so that losing one rack (a switch, a PDU) takes out as few
// of them as possible.
//
// Every node names its rack in a label (`topology.example.com/rack` by default). A node scores by
// how many pods already run in its rack (the sum over the rack's nodes); the host's `reverse`
// normalization turns the emptiest rack into 100 and the fullest into 0. Nodes without the label
// count as a rack of their own each. Configuration (optional), in the scheduler's TOML:
//
//   [plugins.RackSpread]
//   component = "rack_spread.wasm"
//   config = { rack_label = "topology.example.com/rack" }
//
// Built with componentize-js against wasched's WIT (`wasched plugin build` runs it). s64 values
// (scores, resources) are BigInt in JavaScript; node ids and pod counts are numbers, and a list of
// node ids arrives as a Uint32Array.

const VERSION = "1.0.0";

let rackLabel = "topology.example.com/rack";
// node id -> { rack, pods }
const nodes = new Map();
// rack -> pods running on its nodes
const rackPods = new Map();

function rackOf(id, labels) {
  const entry = labels.find(([key]) => key === rackLabel);
  return entry ? `rack:${entry[1]}` : `node:${id}`;
}

function adjust(rack, delta) {
  const total = (rackPods.get(rack) ?? 0) + delta;
  if (total === 0) {
    rackPods.delete(rack);
  } else {
    rackPods.set(rack, total);
  }
}

function forget(id) {
  const old = nodes.get(id);
  if (old) {
    adjust(old.rack, -old.pods);
    nodes.delete(id);
  }
}

export function init(config) {
  let args;
  try {
    args = JSON.parse(config);
  } catch (e) {
    throw `RackSpread config: ${e.message}`;
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw "RackSpread config: expected a table";
  }
  for (const key of Object.keys(args)) {
    if (key !== "rack_label") {
      throw `RackSpread config: unknown field ${key}`;
    }
  }
  if ("rack_label" in args) {
    if (typeof args.rack_label !== "string" || args.rack_label === "") {
      throw "RackSpread config: rack_label must be a non-empty string";
    }
    rackLabel = args.rack_label;
  }
  return {
    name: "RackSpread",
    version: VERSION,
    filter: false,
    score: true,
    normalize: "reverse",
    readsUsage: true,
    // The parts of the pod set-pod sends (flags as booleans); this plugin reads none of them.
    readsPod: {},
  };
}

export function upsertNodes(batch) {
  for (const [id, node] of batch) {
    forget(id);
    const entry = { rack: rackOf(id, node.labels), pods: node.usage.podCount };
    nodes.set(id, entry);
    adjust(entry.rack, entry.pods);
  }
}

export function removeNodes(ids) {
  for (const id of ids) {
    forget(id);
  }
}

export function updateUsage(usage) {
  for (const [id, u] of usage) {
    const entry = nodes.get(id);
    if (entry) {
      adjust(entry.rack, u.podCount - entry.pods);
      entry.pods = u.podCount;
    }
  }
}

export function setPod(_pod) {
  return { filter: { tag: "skip" }, score: true };
}

export function filter(ids) {
  return { verdicts: Array.from(ids, () => 0), failures: [] };
}

export function score(ids) {
  // `ids` is a Uint32Array: map it into a plain array, which may hold BigInts.
  return Array.from(ids, (id) => {
    const entry = nodes.get(id);
    return BigInt(entry ? (rackPods.get(entry.rack) ?? 0) : 0);
  });
}

export function normalize(scores) {
  return scores;
}
