// Package dd holds the decision cores of the data distributor (issue 10):
// pure functions and data structures, with no I/O, that the distributor
// role will drive with what stashes report and turn into transactions on
// the shard map and shard moves.
//
//   - ByteSample: the sample of keys a stash keeps so that the size of any
//     key range, and a key that splits it in halves by bytes, can be
//     estimated without scanning it (FoundationDB's byte sampling).
//   - PlanShards: which shards of a pool to split (over the size limit, at
//     the sampled middle) and which neighbours to merge (small, same team,
//     never across a pool's prefix boundary).
//   - BuildTeams: teams of R stashes of a pool in distinct zones, and what
//     falls short when the pool has fewer zones than R.
//   - Queue: the relocation queue, highest priority first: shards with the
//     fewest live replicas, then shards on excluded stashes, then splits,
//     then rebalancing by bytes.
//
// None of this is wired into the cluster yet.
package dd
