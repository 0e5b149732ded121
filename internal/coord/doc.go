// Package coord is the coordinators' raft group and the cluster
// controller's state (issue 9, point 3).
//
// The coordinators — the nodes named by `distash server --coordinators
// A,B,C` — each run a [Node]: together they form a hashicorp/raft group over
// TCP (mutual TLS when configured, so every link between coordinators honours
// the --tls-* settings) and replicate one [State]:
//
//   - the cluster configuration, as the TOML text the first node wrote
//     (first write wins; a node with a different cluster layout is refused
//     with the field that differs);
//   - the generation (epoch), bumped by every recovery;
//   - the registered nodes: id, address, class (transaction | stash), pool,
//     dc, zone, machine; a stash node holds a stable tag slot of its pool;
//   - the role assignment of the current generation: controller, sequencer,
//     proxies, resolver and log replicas.
//
// The state changes only through [Command]s applied by raft; [State.Apply]
// is a pure state machine, tested without raft. The raft leader is the
// cluster controller: on gaining leadership it first commits a new
// generation naming itself, so each generation has exactly one controller.
// It tracks node liveness by heartbeat in memory (not through raft) and
// places roles with [Recruit]. A new controller has heard from no one but
// itself, so its first generation places the roles on its own node;
// [Node.Recover] starts the next generation once others have heartbeated.
//
// How it will be used: every node of a multi-process cluster registers with
// the controller and heartbeats it; clients and nodes ask any coordinator
// for [State] to find where the roles of the current generation are, and
// follow a [NotLeaderError] to the controller for writes.
package coord
