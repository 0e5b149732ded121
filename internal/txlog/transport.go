package txlog

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// rpcTimeout bounds how long a replica waits for a peer to take and answer
// an RPC (a follower busy fsyncing a large batch can take a while).
const rpcTimeout = 2 * time.Second

// transport is raft.NewInmemTransport's transport plus the heartbeat fast
// path that raft's network transport has and the in-memory one lacks: a
// heartbeat is handed straight to the follower's heartbeat handler instead
// of queueing behind AppendEntries RPCs the follower is writing to disk.
// Without it a follower busy with a large fsync misses heartbeats and the
// leader loses its lease under load.
type transport struct {
	*raft.InmemTransport

	mu    sync.RWMutex
	hb    func(raft.RPC)
	peers map[raft.ServerAddress]*transport
}

func newTransport(addr raft.ServerAddress) *transport {
	_, t := raft.NewInmemTransportWithTimeout(addr, rpcTimeout)
	return &transport{InmemTransport: t, peers: make(map[raft.ServerAddress]*transport)}
}

// SetHeartbeatHandler implements raft.Transport.
func (t *transport) SetHeartbeatHandler(cb func(raft.RPC)) {
	t.mu.Lock()
	t.hb = cb
	t.mu.Unlock()
}

func (t *transport) connect(o *transport) {
	t.InmemTransport.Connect(o.LocalAddr(), o.InmemTransport)
	t.mu.Lock()
	t.peers[o.LocalAddr()] = o
	t.mu.Unlock()
}

func (t *transport) disconnect(addr raft.ServerAddress) {
	t.mu.Lock()
	delete(t.peers, addr)
	t.mu.Unlock()
	t.InmemTransport.Disconnect(addr)
}

func (t *transport) disconnectAll() {
	t.mu.Lock()
	clear(t.peers)
	t.hb = nil
	t.mu.Unlock()
	t.InmemTransport.DisconnectAll()
}

// Close implements raft.WithClose.
func (t *transport) Close() error {
	t.disconnectAll()
	return nil
}

// isHeartbeat is raft's NetworkTransport test for a heartbeat.
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	return a.Term != 0 && (len(a.Addr) != 0 || len(a.Leader) != 0) &&
		a.PrevLogEntry == 0 && a.PrevLogTerm == 0 &&
		len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

// AppendEntries implements raft.Transport.
func (t *transport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if isHeartbeat(args) {
		t.mu.RLock()
		peer := t.peers[target]
		t.mu.RUnlock()
		if peer == nil {
			return fmt.Errorf("failed to connect to peer: %v", target)
		}
		peer.mu.RLock()
		fn := peer.hb
		peer.mu.RUnlock()
		if fn != nil {
			respCh := make(chan raft.RPCResponse, 1)
			fn(raft.RPC{Command: args, RespChan: respCh})
			timer := time.NewTimer(rpcTimeout)
			defer timer.Stop()
			select {
			case r := <-respCh:
				if r.Error != nil {
					return r.Error
				}
				*resp = *r.Response.(*raft.AppendEntriesResponse)
				return nil
			case <-timer.C:
				return fmt.Errorf("heartbeat to %v timed out", target)
			}
		}
	}
	return t.InmemTransport.AppendEntries(id, target, args, resp)
}
