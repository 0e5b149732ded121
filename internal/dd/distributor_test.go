package dd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// fakeEnv is a cluster for the distributor: a shard map changed only by
// CommitShards, stashes whose liveness the test sets, and byte counts per
// shard. Destinations finish fetching at once unless stuck.
type fakeEnv struct {
	mu      sync.Mutex
	m       *shardmap.Map
	stashes []StashInfo
	bytes   map[string]int64   // by shard begin
	rates   map[string]float64 // write rate by shard begin
	stuck   map[kv.Tag]bool    // destinations that never finish
	retired []kv.Tag
	commits int
	// version counts the commits: the shard map's version. A stash in
	// stale answers from the map it had (and the version it had applied)
	// when it went stale, as a restarted stash that has not caught up does.
	version kv.Version
	stale   map[kv.Tag]staleView
}

type staleView struct {
	m  *shardmap.Map
	at kv.Version
}

func (e *fakeEnv) shards() *shardmap.Map {
	m, _ := e.Shards()
	return m
}

func (e *fakeEnv) Shards() (*shardmap.Map, kv.Version) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m.Clone(), e.version
}

func (e *fakeEnv) Stashes() []StashInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.stashes)
}

func (e *fakeEnv) Metrics(ctx context.Context, tag kv.Tag, ranges []kv.KeyRange, splitKeys bool) ([]Metrics, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Metrics, len(ranges))
	m, applied := e.m, e.version
	if sv, ok := e.stale[tag]; ok {
		m, applied = sv.m, sv.at
	}
	for i, r := range ranges {
		out[i].Applied = applied
		sh, _ := m.Lookup(r.Begin)
		out[i].Bytes = e.bytes[string(r.Begin)]
		if rate := e.rates[string(r.Begin)]; rate > 0 {
			out[i].WriteRate = rate
			out[i].WriteSplitKey = append(append([]byte(nil), r.Begin...), 'm')
		}
		switch {
		case slices.Contains(sh.Team, tag):
			out[i].State = "serving"
		case slices.Contains(sh.Dest, tag) && e.stuck[tag]:
			out[i].State = "fetching"
		case slices.Contains(sh.Dest, tag):
			out[i].State = "serving"
		default:
			out[i].State = "none"
		}
	}
	return out, nil
}

func (e *fakeEnv) CommitShards(ctx context.Context, set []shardmap.Shard, clear [][]byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.commits++
	e.version++
	for _, sh := range set {
		k, v := shardmap.Encode(sh)
		if _, err := e.m.Apply(kv.Mutation{Type: kv.MutSet, Key: k, Param: v}); err != nil {
			return err
		}
	}
	for _, b := range clear {
		e.m.Apply(kv.Mutation{Type: kv.MutClear, Key: shardmap.Key(b)})
	}
	return nil
}

func (e *fakeEnv) Retire(ctx context.Context, tag kv.Tag) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.retired = append(e.retired, tag)
	return nil
}

func (e *fakeEnv) set(tag kv.Tag, f func(*StashInfo)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.stashes {
		if e.stashes[i].Tag == tag {
			f(&e.stashes[i])
		}
	}
}

// teamsOf returns the team of every shard of pool.
func (e *fakeEnv) teamsOf(pool string) [][]kv.Tag {
	var out [][]kv.Tag
	for _, sh := range e.shards().Shards() {
		if sh.Pool == pool {
			out = append(out, sh.Team)
		}
	}
	return out
}

// newFake makes a pool "p" (prefix p/) of 8 shards of 100 bytes each on
// stashes 1..n (in DCs and zones given by loc), teams of r.
func newFake(n, r int, loc func(i int) (dc, zone string)) *fakeEnv {
	e := &fakeEnv{bytes: map[string]int64{}, rates: map[string]float64{}, stuck: map[kv.Tag]bool{}}
	var tags []kv.Tag
	for i := 1; i <= n; i++ {
		dc, zone := loc(i)
		e.stashes = append(e.stashes, StashInfo{Tag: kv.Tag(i), Pool: "p", DC: dc, Zone: zone, Alive: true})
		tags = append(tags, kv.Tag(i))
	}
	shards := []shardmap.Shard{{Begin: []byte{0xff}, End: []byte{0xff, 0xff}, Pool: "system", Team: []kv.Tag{0}}}
	for i := 0; i < 8; i++ {
		b := []byte(fmt.Sprintf("p/%d", i))
		end := []byte(fmt.Sprintf("p/%d", i+1))
		if i == 7 {
			end = []byte("p0")
		}
		if i == 0 {
			b = []byte("p/")
		}
		team := make([]kv.Tag, 0, r)
		for j := 0; j < r; j++ {
			team = append(team, tags[(i+j)%n])
		}
		shards = append(shards, shardmap.Shard{Begin: b, End: end, Pool: "p", Team: team})
		e.bytes[string(b)] = 100
	}
	e.m = shardmap.New(shards)
	return e
}

func newDist(e *fakeEnv, r int, ephemeral, acrossDCs bool, wait time.Duration, clk *clock.Manual) *Distributor {
	return New(Options{
		Env: e,
		Pools: func() []PoolSettings {
			return []PoolSettings{{Name: "p", Prefix: []byte("p/"), Replication: r, Ephemeral: ephemeral, AcrossDCs: acrossDCs}}
		},
		FailureWait: func() time.Duration { return wait },
		ShardBytes:  400, // 100-byte shards neither split nor merge
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:       clk,
	})
}

// rounds runs n rounds.
func rounds(t *testing.T, d *Distributor, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := d.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func zoned(i int) (string, string) { return "dc1", fmt.Sprintf("z%d", i) }

// A dead stash's shards stay put for the failure wait, then move to live
// stashes; once none names it, it is retired.
func TestFailureWaitThenReReplicate(t *testing.T) {
	e := newFake(4, 2, zoned)
	clk := clock.NewManual(time.Unix(1000, 0))
	d := newDist(e, 2, false, false, time.Minute, clk)
	rounds(t, d, 2)
	before := e.teamsOf("p")
	e.set(2, func(s *StashInfo) { s.Alive = false })
	rounds(t, d, 3)
	clk.Advance(59 * time.Second)
	rounds(t, d, 3)
	if got := e.teamsOf("p"); !slices.EqualFunc(got, before, slices.Equal) {
		t.Fatalf("shards moved before the failure wait: %v -> %v", before, got)
	}
	if st, _ := d.Status(); st["p"].UnderReplicated == 0 {
		t.Error("status shows no under-replicated shard while stash 2 is down")
	}
	clk.Advance(2 * time.Second)
	rounds(t, d, 6)
	for _, team := range e.teamsOf("p") {
		if len(team) != 2 || slices.Contains(team, 2) {
			t.Fatalf("after the failure wait a team is %v", team)
		}
	}
	if !slices.Contains(e.retired, 2) {
		t.Errorf("stash 2 not retired once no shard names it (retired %v)", e.retired)
	}
	if st, _ := d.Status(); st["p"].UnderReplicated != 0 || st["p"].Moving != 0 {
		t.Errorf("status after the rebuild: %+v", st["p"])
	}
}

// A stash that returns within the failure wait keeps its shards.
func TestReturnWithinFailureWaitKeepsShards(t *testing.T) {
	e := newFake(4, 2, zoned)
	clk := clock.NewManual(time.Unix(1000, 0))
	d := newDist(e, 2, false, false, time.Minute, clk)
	rounds(t, d, 2)
	before := e.teamsOf("p")
	e.set(3, func(s *StashInfo) { s.Alive = false })
	rounds(t, d, 2)
	clk.Advance(30 * time.Second)
	e.set(3, func(s *StashInfo) { s.Alive = true })
	rounds(t, d, 2)
	clk.Advance(time.Hour)
	rounds(t, d, 4)
	if got := e.teamsOf("p"); !slices.EqualFunc(got, before, slices.Equal) {
		t.Fatalf("teams changed: %v -> %v", before, got)
	}
}

// Excluded stashes are drained; include brings shards back by balance.
func TestExcludeDrains(t *testing.T) {
	e := newFake(4, 1, zoned)
	clk := clock.NewManual(time.Unix(1000, 0))
	d := newDist(e, 1, false, false, time.Minute, clk)
	e.set(4, func(s *StashInfo) { s.Excluded = true })
	rounds(t, d, 6)
	for _, team := range e.teamsOf("p") {
		if slices.Contains(team, 4) {
			t.Fatalf("excluded stash 4 still in team %v", team)
		}
	}
	e.set(4, func(s *StashInfo) { s.Excluded = false })
	rounds(t, d, 10)
	n := 0
	for _, team := range e.teamsOf("p") {
		if slices.Contains(team, 4) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("after include stash 4 holds %d of 8 equal shards, want 2", n)
	}
}

// Teams spread over zones, and over DCs when the pool asks for it.
func TestPlacementAcrossDCs(t *testing.T) {
	// Stashes 1-3 in dc1, 4-6 in dc2; every stash its own zone.
	loc := func(i int) (string, string) { return fmt.Sprintf("dc%d", (i-1)/3+1), fmt.Sprintf("z%d", i) }
	e := newFake(6, 2, loc)
	clk := clock.NewManual(time.Unix(1000, 0))
	d := newDist(e, 2, false, true, time.Minute, clk)
	// Fail stash 1 and 4: the rebuilt teams must span both DCs.
	e.set(1, func(s *StashInfo) { s.Retired = true })
	e.set(4, func(s *StashInfo) { s.Retired = true })
	rounds(t, d, 8)
	dcOf := func(t kv.Tag) string { dc, _ := loc(int(t)); return dc }
	for _, sh := range e.shards().Shards() {
		if sh.Pool != "p" {
			continue
		}
		if len(sh.Team) != 2 {
			t.Fatalf("team %v", sh.Team)
		}
		if slices.Contains(sh.Team, 1) || slices.Contains(sh.Team, 4) {
			t.Fatalf("retired stash in team %v", sh.Team)
		}
	}
	// Every rebuilt team (those that had 1 or 4) spans the two DCs; one
	// that lost nobody may stay in one DC (nothing moved it).
	for _, sh := range e.shards().Shards() {
		if sh.Pool == "p" && rebuilt(sh.Begin) && dcOf(sh.Team[0]) == dcOf(sh.Team[1]) {
			t.Errorf("rebuilt team %v of [%s, %s) is in one DC", sh.Team, sh.Begin, sh.End)
		}
	}
}

// rebuilt reports whether the shard at begin had stash 1 or 4 in the
// first layout of newFake(6, 2, ...): shards 0 (1,2), 3 (4,5), 5 (6,1)
// and 2 (3,4).
func rebuilt(begin []byte) bool {
	return slices.Contains([]string{"p/", "p/2", "p/3", "p/5"}, string(begin))
}

// An ephemeral shard with no live replica starts empty on a new team at
// once; a durable one waits for a replica to return.
func TestNoReplicaLeft(t *testing.T) {
	for _, ephemeral := range []bool{true, false} {
		e := newFake(3, 1, zoned)
		clk := clock.NewManual(time.Unix(1000, 0))
		d := newDist(e, 1, ephemeral, false, 0, clk)
		e.set(1, func(s *StashInfo) { s.Retired = true })
		rounds(t, d, 3)
		var on1 int
		for _, team := range e.teamsOf("p") {
			if slices.Contains(team, 1) {
				on1++
			}
		}
		if ephemeral && on1 != 0 {
			t.Errorf("ephemeral: %d shards still on the retired stash", on1)
		}
		if !ephemeral && on1 == 0 {
			t.Errorf("durable: shards of the only replica were given up")
		}
	}
}

// Replication changes online: up adds replicas, down drops them.
func TestReplicationChange(t *testing.T) {
	e := newFake(4, 1, zoned)
	clk := clock.NewManual(time.Unix(1000, 0))
	r := 1
	d := New(Options{Env: e, Pools: func() []PoolSettings {
		return []PoolSettings{{Name: "p", Prefix: []byte("p/"), Replication: r}}
	}, FailureWait: func() time.Duration { return time.Minute }, ShardBytes: 400, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r = 3
	rounds(t, d, 8)
	for _, team := range e.teamsOf("p") {
		if len(team) != 3 {
			t.Fatalf("after replication 3: team %v", team)
		}
	}
	r = 2
	rounds(t, d, 4)
	for _, team := range e.teamsOf("p") {
		if len(team) != 2 {
			t.Fatalf("after replication 2: team %v", team)
		}
	}
}

// A move whose destination never finishes stays in flight, and one whose
// destination dies is cancelled and done again elsewhere.
func TestMoveToDeadDestinationIsCancelled(t *testing.T) {
	e := newFake(3, 1, zoned)
	clk := clock.NewManual(time.Unix(1000, 0))
	d := newDist(e, 1, false, false, time.Minute, clk)
	e.stuck[2] = true
	e.set(1, func(s *StashInfo) { s.Excluded = true })
	rounds(t, d, 2)
	st, _ := d.Status()
	if st["p"].Moving == 0 {
		t.Fatalf("no move in flight: %+v", st["p"])
	}
	e.set(2, func(s *StashInfo) { s.Alive = false })
	rounds(t, d, 6)
	for _, sh := range e.shards().Shards() {
		if slices.Contains(sh.Dest, 2) {
			t.Fatalf("a move to dead stash 2 is still in flight: %+v", sh)
		}
		if sh.Pool == "p" && slices.Contains(sh.Team, 1) {
			t.Fatalf("excluded stash 1 still holds %+v", sh)
		}
	}
}

// A shard written fast splits at the key halving its write rate (once it
// holds an eighth of the size limit), and does not merge back while hot;
// a cold small one does not split.
func TestWriteRateSplits(t *testing.T) {
	e := newFake(2, 1, zoned)
	clk := clock.NewManual(time.Unix(1000, 0))
	d := newDist(e, 1, false, false, time.Minute, clk)
	d.opts.WriteSplitRate = 500
	e.bytes["p/3"] = 60 // >= 400/8
	e.rates["p/3"] = 1000
	e.rates["p/5"] = 1000 // hot but small: stays whole
	e.bytes["p/5"] = 40   // < 400/8
	rounds(t, d, 3)
	var begins []string
	for _, sh := range e.shards().Shards() {
		if sh.Pool == "p" {
			begins = append(begins, string(sh.Begin))
		}
	}
	if !slices.Contains(begins, "p/3m") {
		t.Errorf("the hot shard p/3 did not split at its write split key: %q", begins)
	}
	if slices.Contains(begins, "p/5m") {
		t.Errorf("a hot shard below an eighth of the size limit split: %q", begins)
	}
}

// A destination that answers from before the move began (a stash that
// restarted from an ownership in which it still served the range, and has
// not applied the log since) must not finish the move: the sources would
// drop the range while the destination, once it catches up, still has it
// to fetch — from sources that no longer hold it.
func TestStaleDestinationDoesNotFinishMove(t *testing.T) {
	e := newFake(2, 1, zoned) // shards alternate between stashes 1 and 2
	clk := clock.NewManual(time.Unix(1000, 0))
	d := newDist(e, 1, false, false, time.Minute, clk)
	var shard []byte
	for _, sh := range e.shards().Shards() {
		if sh.Pool == "p" && slices.Equal(sh.Team, []kv.Tag{2}) {
			shard = sh.Begin
			break
		}
	}
	// Stash 2 serves the shard; the shard moves to stash 1 (committed:
	// stash 2 must drop it), and stash 2 restarts from before it applied
	// that: it answers from the old map.
	e.mu.Lock()
	before := staleView{m: e.m.Clone(), at: e.version}
	e.mu.Unlock()
	sh, _ := e.shards().Lookup(shard)
	sh.Team = []kv.Tag{1}
	if err := e.CommitShards(context.Background(), []shardmap.Shard{sh}, nil); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.stale = map[kv.Tag]staleView{2: before}
	e.mu.Unlock()
	// Stash 1 is excluded: its shards move to stash 2.
	e.set(1, func(s *StashInfo) { s.Excluded = true })
	rounds(t, d, 4)
	got, _ := e.shards().Lookup(shard)
	if !slices.Equal(got.Team, []kv.Tag{1}) || !slices.Equal(got.Dest, []kv.Tag{2}) {
		t.Fatalf("while stash 2 answers from before the move, shard %q is team %v dest %v; want team [1] dest [2] (moving)", shard, got.Team, got.Dest)
	}
	// Stash 2 catches up: the move finishes.
	e.mu.Lock()
	e.stale = nil
	e.mu.Unlock()
	rounds(t, d, 2)
	got, _ = e.shards().Lookup(shard)
	if !slices.Equal(got.Team, []kv.Tag{2}) || len(got.Dest) != 0 {
		t.Fatalf("after stash 2 caught up, shard %q is team %v dest %v; want team [2]", shard, got.Team, got.Dest)
	}
}
