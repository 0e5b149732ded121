package txlog

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
)

// Member is a server of the log's raft configuration.
type Member struct {
	ID, Addr string
	Voter    bool
}

// Members returns the log's raft configuration as the local replica knows
// it (network mode; in embedded mode the first running replica's).
func (l *Log) Members() ([]Member, error) {
	l.mu.RLock()
	var r *raft.Raft
	for _, rep := range l.reps {
		if rep.running {
			r = rep.raft
			break
		}
	}
	l.mu.RUnlock()
	if r == nil {
		return nil, ErrClosed
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// AddVoter adds a replica to the log's raft configuration as a voter, on
// the leader (ErrNotLeader elsewhere). The replica's node then opens it
// with NetworkOptions.Join and the leader catches it up; until it has,
// commits need a majority of the other members.
func (l *Log) AddVoter(ctx context.Context, id, addr string) error {
	r := l.leader()
	if r == nil {
		return ErrNotLeader
	}
	f := r.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, ctxTimeout(ctx, l.opts.LeaderTimeout))
	if err := awaitFutureCtx(ctx, f, r.stopped); err != nil {
		return fmt.Errorf("txlog: add replica %s at %s: %w", id, addr, leaderErr(ctx, err))
	}
	l.logger.Warn("txlog: replica added to the log", "id", id, "addr", addr)
	return nil
}

// RemoveServer removes a replica from the log's raft configuration, on
// the leader (ErrNotLeader elsewhere): a replica whose state is lost must
// leave before anything answers at its address under a new id, so that
// its vote never counts again.
func (l *Log) RemoveServer(ctx context.Context, id string) error {
	r := l.leader()
	if r == nil {
		return ErrNotLeader
	}
	if string(r.id) == id {
		return fmt.Errorf("txlog: the leader %s cannot remove itself", id)
	}
	f := r.raft.RemoveServer(raft.ServerID(id), 0, ctxTimeout(ctx, l.opts.LeaderTimeout))
	if err := awaitFutureCtx(ctx, f, r.stopped); err != nil {
		return fmt.Errorf("txlog: remove replica %s: %w", id, leaderErr(ctx, err))
	}
	l.logger.Warn("txlog: replica removed from the log", "id", id)
	return nil
}
