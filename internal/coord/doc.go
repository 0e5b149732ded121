// Package coord is the coordinators' raft group and the cluster
// controller's state (issue 9, point 3).
//
// The coordinators — the nodes named by `distash server --coordinators
// A,B,C` — each run a [Node]: together they form a hashicorp/raft group
// over the stream layer of kind raftnet.KindCoord of the node's
// internal/raftnet mux, which shares the node's one --listen address with
// gRPC and the log's raft (mutual TLS when configured, so every link
// between coordinators honours the --tls-* settings), and replicate one
// [State]:
//
//   - the cluster configuration, as the TOML text the first node wrote
//     (first write wins; a node with a different cluster layout is refused
//     with the field that differs);
//   - the generation (epoch), bumped by every recovery;
//   - the registered nodes: id, address, class (transaction | stash), pool,
//     dc, zone, machine; a stash node holds a stable slot of its pool, and
//     each slot has its tag (State.SlotTags): a slot gets a fresh tag when
//     its tag was retired (Retire) or when a stash that starts empty would
//     take a tag that served before, and a pool grows by a slot when a
//     stash node joins and finds none free ([RegisterStash]);
//   - the excluded addresses (Exclude, Include) and the live settings that
//     override the configuration: failure_wait and each pool's replication
//     ([Configure], [ConfigurePool]);
//   - the role assignment of the current generation: controller, sequencer,
//     proxies, resolver and log replicas;
//   - the last claim of the stateless roles and how long its recovery took
//     ([State.Recovery]).
//
// The state changes only through [Command]s applied by raft; [State.Apply]
// is a pure state machine, tested without raft (its JSON encodings carry a
// version, and older versions still decode). The raft leader is the
// cluster controller: on gaining leadership it first commits a new
// generation naming itself, so each generation has exactly one controller;
// that generation keeps the roles as they were, since the log replicas are
// the log's raft membership (the log's leader replaces a lost one and
// records it with SetLogReplicas, which starts no generation) and the
// stateless roles belong to whoever claimed them. The controller tracks
// node liveness by heartbeat in memory (not through raft).
//
// The roles are placed in two steps:
//
//   - [Node.RecruitLog] forms the log: while no log replica is placed and
//     at least log.replicas transaction nodes are alive, it commits a
//     generation with that many log replicas, spread over zones by
//     [Recruit], and no stateless role. The controller tries it when its
//     term starts; the Coordinator service (internal/coordrpc) when a
//     transaction node registers or heartbeats.
//   - [Node.Claim]: the node whose log replica became the log's raft leader
//     takes every stateless role (sequencer, proxies, resolver) in a new
//     generation, the epoch its log appends carry; [Node.RecoveryDone]
//     records how long its recovery took.
//
// [Node.Recover] re-recruits every role at once, log replicas included:
// for tests and clusters whose log is not running.
//
// A coordinator's raft server id carries an incarnation that dies with
// its raft state, and one without state joins as a new member rather than
// under its old id (membership.go, AddMember).
//
// How it will be used: every node of a multi-process cluster registers with
// the controller and heartbeats it; clients and nodes ask any coordinator
// for [State] to find where the roles of the current generation are, and
// follow a [NotLeaderError] to the controller for writes.
package coord
