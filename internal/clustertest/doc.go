// Package clustertest runs multi-node DiStash clusters for the tests and
// the benchmarks: one way to lay out nodes, pick their ports, write their
// configuration, start them, stop, kill, pause and resume them, wait for a
// condition with a deadline and read their status.
//
// Two kinds of cluster share the layout (Spec) and the helpers:
//
//   - Sim runs every node in this process (server.StartNode) over an
//     in-process network (internal/simnet) that can partition, delay,
//     pause and kill links; a node's disk may be a fault file system. The
//     server package's cluster tests use it.
//
//   - Procs runs every node as a real `distash server` process of a built
//     binary on loopback ports; a node is killed with SIGKILL and paused
//     with SIGSTOP. The command's process tests and `distash bench
//     failure` and `bench cpu` use it.
//
// For example:
//
//	c, err := clustertest.NewProcs(clustertest.ProcsOptions{Binary: bin, Dir: dir, TOML: toml,
//		Nodes: clustertest.Specs("tx1 transaction", "data1 stash data")})
//	defer c.StopAll()
//	err = c.Start(ctx)                      // every node, until each serves
//	c.Node("data1").Kill()                  // kill -9
//	err = c.Start(ctx, c.Node("data1"))     // and again
package clustertest
