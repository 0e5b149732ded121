// Package dd is the data distributor: decision cores (pure functions and
// data structures, no I/O) and the Distributor, a thin driver that feeds
// them what the stashes report (through its Env; they estimate sizes and
// write rates with internal/loadsample) and carries out their decisions as
// transactions on the shard map. The server runs one Distributor with the
// stateless roles (server/distribution.go).
//
//   - PlanPool (planner.go): a round for one pool, as a function from a
//     Snapshot (its shards with their sizes and write rates, the stashes
//     with their liveness, how long each has been down, exclusions and
//     data centers, the moves in flight, the time) to actions: finish,
//     cancel or continue each move in flight, then start or hold back the
//     queued relocations (moves, splits, merges, team changes). Its
//     script tests are testdata/*.txt (planner_test.go).
//   - PlanShards: which shards of a pool to split (over the size limit, at
//     the sampled middle) and which neighbours to merge (small, same team,
//     never across a pool's prefix boundary).
//   - BuildTeams: teams of R stashes of a pool in distinct zones, and what
//     falls short when the pool has fewer zones than R.
//   - Queue: the relocation queue, highest priority first: shards with the
//     fewest live replicas, then shards on excluded stashes, then splits,
//     then rebalancing by bytes.
//   - Distributor (driver.go): every round observes the stashes (noting
//     since when each is down), gathers each pool's Snapshot (the shard
//     map, one metrics request per stash, the destinations' progress),
//     calls PlanPool, commits the actions and keeps the moves in flight;
//     last it retires failed stashes no shard names any more.
package dd
