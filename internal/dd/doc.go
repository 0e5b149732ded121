// Package dd is the data distributor: decision cores (pure functions and
// data structures, no I/O) and the Distributor that drives them with what
// stashes report (through its Env; they estimate sizes and write rates
// with internal/loadsample) and turns them into transactions on the
// shard map and shard moves. The server runs one Distributor with the
// stateless roles (server/distribution.go).
//
//   - PlanShards: which shards of a pool to split (over the size limit, at
//     the sampled middle) and which neighbours to merge (small, same team,
//     never across a pool's prefix boundary).
//   - BuildTeams: teams of R stashes of a pool in distinct zones, and what
//     falls short when the pool has fewer zones than R.
//   - Queue: the relocation queue, highest priority first: shards with the
//     fewest live replicas, then shards on excluded stashes, then splits,
//     then rebalancing by bytes.
//   - Distributor: every pool's tracking, splits (by size and by write
//     rate), merges, teams, re-replication after failure_wait, exclusion
//     and rebalancing, one pass per tick.
package dd
