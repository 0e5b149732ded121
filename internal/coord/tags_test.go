package coord

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/distash/distash/config"
)

func stashNode(id, pool string) NodeInfo {
	return NodeInfo{ID: id, Addr: id + ":1", Class: ClassStash, Pool: pool, DC: "dc1", Zone: "z1"}
}

// newTagState is the default configuration (cache: tags 1, 2; data: 3, 4).
func newTagState(t *testing.T) *State {
	t.Helper()
	s := &State{}
	mustApply(t, s, SetConfig(testConfig(t, nil)))
	want := map[string][]uint32{"cache": {1, 2}, "data": {3, 4}}
	if !reflect.DeepEqual(s.SlotTags, want) || s.NextTag != 5 || len(s.UsedTags) != 0 {
		t.Fatalf("slot tags %v next %d used %v, want %v next 5", s.SlotTags, s.NextTag, s.UsedTags, want)
	}
	return s
}

func register(t *testing.T, s *State, n NodeInfo, empty bool) Result {
	t.Helper()
	return mustApply(t, s, RegisterStash(n, empty))
}

func TestRegisterRules(t *testing.T) {
	s := newTagState(t)
	// First registrations take the configuration's tags.
	if r := register(t, s, stashNode("a", "data"), true); r.Slot != 0 || r.Tag != 3 {
		t.Fatalf("a: slot %d tag %d, want 0 3", r.Slot, r.Tag)
	}
	if r := register(t, s, stashNode("b", "data"), false); r.Slot != 1 || r.Tag != 4 {
		t.Fatalf("b: slot %d tag %d, want 1 4", r.Slot, r.Tag)
	}
	if !slices.Equal(s.UsedTags, []uint32{3, 4}) {
		t.Fatalf("used %v", s.UsedTags)
	}
	// A durable stash that comes back with its data keeps its tag.
	if r := register(t, s, stashNode("a", "data"), false); r.Slot != 0 || r.Tag != 3 {
		t.Fatalf("a again, not empty: slot %d tag %d, want 0 3", r.Slot, r.Tag)
	}
	// An empty stash whose tag served gets a fresh one in the same slot.
	if r := register(t, s, stashNode("a", "data"), true); r.Slot != 0 || r.Tag != 5 || s.NextTag != 6 {
		t.Fatalf("a again, empty: slot %d tag %d next %d, want 0 5 6", r.Slot, r.Tag, s.NextTag)
	}
	if s.SlotTag("data", 0) != 5 || !s.TagUsed(5) || !s.TagUsed(3) {
		t.Fatalf("slot tags %v used %v", s.SlotTags, s.UsedTags)
	}
	// Pool growth: a third stash of a 2-slot pool gets a new slot and tag.
	if r := register(t, s, stashNode("c", "data"), true); r.Slot != 2 || r.Tag != 6 {
		t.Fatalf("c: slot %d tag %d, want the new slot 2 with tag 6", r.Slot, r.Tag)
	}
	if len(s.Tags["data"]) != 3 || len(s.SlotTags["data"]) != 3 {
		t.Fatalf("data slots %v tags %v", s.Tags["data"], s.SlotTags["data"])
	}
	// A free slot whose tag served: the newcomer gets a fresh tag.
	mustApply(t, s, RemoveNode("b"))
	if r := register(t, s, stashNode("d", "data"), false); r.Slot != 1 || r.Tag != 7 {
		t.Fatalf("d in b's freed slot: slot %d tag %d, want 1 7", r.Slot, r.Tag)
	}
	// A free slot whose tag never served keeps it (the initial shard map
	// names it).
	if r := register(t, s, stashNode("e", "cache"), true); r.Slot != 0 || r.Tag != 1 {
		t.Fatalf("e: slot %d tag %d, want 0 1", r.Slot, r.Tag)
	}
	// A retired tag: its node gets a fresh one when it registers next,
	// empty or not; a free slot with a retired tag too.
	mustApply(t, s, Retire(7))
	if s.SlotTag("data", 1) != 7 {
		t.Fatal("retire changed a slot's tag before its node registered again")
	}
	if r := register(t, s, stashNode("d", "data"), false); r.Slot != 1 || r.Tag != 8 {
		t.Fatalf("d after retire: slot %d tag %d, want 1 8", r.Slot, r.Tag)
	}
	mustApply(t, s, Retire(2)) // never used, in a free slot
	if r := register(t, s, stashNode("f", "cache"), false); r.Slot != 1 || r.Tag != 9 {
		t.Fatalf("f in a slot with a retired tag: slot %d tag %d, want 1 9", r.Slot, r.Tag)
	}
	// Transaction nodes have no tag.
	if r := mustApply(t, s, RegisterStash(NodeInfo{ID: "t", Addr: "t:1", Class: ClassTransaction}, true)); r.Slot != -1 || r.Tag != 0 {
		t.Fatalf("transaction node: %+v", r)
	}
	// Tags are never given twice.
	seen := map[uint32]bool{}
	for _, tags := range s.SlotTags {
		for _, tg := range tags {
			if seen[tg] {
				t.Fatalf("tag %d in two slots: %v", tg, s.SlotTags)
			}
			seen[tg] = true
		}
	}
}

// TestRegisterRetryKeepsTag: a node process whose registration was applied
// but not answered (the client's attempt timed out while raft committed
// it) sends it again; the retry, from the same incarnation, keeps the tag
// the first one took, empty or not. Before incarnations the retry of an
// empty stash retired the tag it had just taken, so the data distributor
// found the initial shard map's tag retired and started its cache shards
// empty on a new team, although the stash was alive.
func TestRegisterRetryKeepsTag(t *testing.T) {
	s := newTagState(t)
	a := stashNode("a", "cache")
	a.Incarnation = "start-1"
	for i := range 2 {
		if r := register(t, s, a, true); r.Slot != 0 || r.Tag != 1 {
			t.Fatalf("registration %d of a's first process: slot %d tag %d, want 0 1", i+1, r.Slot, r.Tag)
		}
	}
	if len(s.Retired) != 0 || s.NextTag != 5 {
		t.Fatalf("after a retried registration: retired %v, next tag %d", s.Retired, s.NextTag)
	}
	// A new process of the node that comes back empty gets a fresh tag
	// (its data is gone), and its own retry keeps that one.
	a.Incarnation = "start-2"
	for i := range 2 {
		if r := register(t, s, a, true); r.Slot != 0 || r.Tag != 5 {
			t.Fatalf("registration %d of a's second process: slot %d tag %d, want 0 5", i+1, r.Slot, r.Tag)
		}
	}
	if !slices.Equal(s.Retired, []uint32{1}) {
		t.Fatalf("retired %v, want [1]", s.Retired)
	}
	// A process that retired its own tag (a stash that rejoins as a new
	// one) gets a fresh tag from the same incarnation.
	mustApply(t, s, Retire(5))
	if r := register(t, s, a, true); r.Slot != 0 || r.Tag != 6 {
		t.Fatalf("after retiring its tag: slot %d tag %d, want 0 6", r.Slot, r.Tag)
	}
	// A node that names no incarnation (an older binary) is treated as
	// before: empty with a used tag means a fresh one.
	a.Incarnation = ""
	if r := register(t, s, a, true); r.Tag != 7 {
		t.Fatalf("without incarnation: tag %d, want 7", r.Tag)
	}
	if r := register(t, s, a, true); r.Tag != 8 {
		t.Fatalf("without incarnation, again: tag %d, want 8", r.Tag)
	}
}

// TestStaleIncarnationRegistrationIsIgnored: a registration that a killed
// process of a node sent, applied after its successor registered, changes
// nothing: the successor keeps its tag (none is retired) and its address.
func TestStaleIncarnationRegistrationIsIgnored(t *testing.T) {
	s := newTagState(t)
	a := stashNode("a", "cache")
	a.Incarnation = "100.aa"
	if r := register(t, s, a, true); r.Tag != 1 {
		t.Fatalf("first process: tag %d, want 1", r.Tag)
	}
	// The second process comes back empty: a fresh tag, the first's retired.
	second := a
	second.Incarnation, second.Addr = "200.bb", "10.0.0.2:4500"
	if r := register(t, s, second, true); r.Tag != 5 {
		t.Fatalf("second process: tag %d, want 5", r.Tag)
	}
	// The first process's registration, still in flight when it was
	// killed, arrives now.
	_, err := s.Apply(RegisterStash(a, true))
	if err == nil || !strings.Contains(err.Error(), "earlier process") {
		t.Fatalf("stale registration: %v, want it refused", err)
	}
	if !slices.Equal(s.Retired, []uint32{1}) || s.SlotTags["cache"][0] != 5 || s.Nodes["a"].Incarnation != "200.bb" || s.Nodes["a"].Addr != "10.0.0.2:4500" {
		t.Fatalf("after the stale registration: retired %v, slot tag %d, node %+v", s.Retired, s.SlotTags["cache"][0], s.Nodes["a"])
	}
	// The second process's retry still keeps its tag; a third process
	// (later start) that comes back empty gets a fresh one.
	if r := register(t, s, second, true); r.Tag != 5 {
		t.Fatalf("second process's retry: tag %d, want 5", r.Tag)
	}
	third := a
	third.Incarnation = "300.cc"
	if r := register(t, s, third, true); r.Tag != 6 {
		t.Fatalf("third process: tag %d, want 6", r.Tag)
	}
	// Names without a sequence (a release before it) order nothing.
	if staleIncarnation("start-1", "300.cc") || staleIncarnation("1.x", "start-2") || !staleIncarnation("9.x", "10.y") {
		t.Fatal("staleIncarnation orders names without a sequence, or not 9 before 10")
	}
}

func TestRegisterGrowthBound(t *testing.T) {
	s := &State{}
	mustApply(t, s, SetConfig(testConfig(t, func(c *config.Config) { c.Pools[1].Stashes = config.MaxStashesPerPool })))
	for i := range config.MaxStashesPerPool {
		register(t, s, stashNode(fmt.Sprint("n", i), "data"), false)
	}
	before := s.Clone()
	if _, err := s.Apply(RegisterStash(stashNode("last", "data"), false)); err == nil || !strings.Contains(err.Error(), "MaxStashesPerPool") {
		t.Fatalf("registration past the bound: %v", err)
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatal("a refused registration changed the state")
	}
}

func TestRetire(t *testing.T) {
	s := newTagState(t)
	before := s.Clone()
	for _, tag := range []uint32{0, 5, 99} {
		if _, err := s.Apply(Retire(tag)); err == nil || !strings.Contains(err.Error(), "never given") {
			t.Fatalf("retire %d: %v", tag, err)
		}
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatal("a refused retire changed the state")
	}
	mustApply(t, s, Retire(4))
	mustApply(t, s, Retire(4)) // idempotent
	mustApply(t, s, Retire(1))
	if !slices.Equal(s.Retired, []uint32{1, 4}) || !s.TagRetired(4) || s.TagRetired(3) {
		t.Fatalf("retired %v", s.Retired)
	}
	if _, err := (&State{}).Apply(Retire(1)); err == nil {
		t.Fatal("retire without a configuration accepted")
	}
}

func TestExcludeInclude(t *testing.T) {
	s := newTagState(t)
	mustApply(t, s, Exclude([]string{"b:2", "a:1", "b:2"}))
	mustApply(t, s, Exclude([]string{"c:3"}))
	if !slices.Equal(s.Excluded, []string{"a:1", "b:2", "c:3"}) || !s.IsExcluded("b:2") || s.IsExcluded("d:4") {
		t.Fatalf("excluded %v", s.Excluded)
	}
	before := s.Clone()
	for _, bad := range [][]string{nil, {"a:1", "nohost"}, {":1"}, {"x:"}, {"all"}} {
		_, err := s.Apply(Exclude(bad))
		if err == nil {
			t.Fatalf("exclude %q accepted", bad)
		}
		if len(bad) > 0 && !strings.Contains(err.Error(), bad[len(bad)-1]) {
			t.Errorf("exclude %q: error %q does not name the bad address", bad, err)
		}
	}
	if _, err := s.Apply(Include([]string{"a:1", "all"})); err == nil {
		t.Fatal(`include "all" with an address accepted`)
	}
	if _, err := s.Apply(Include([]string{"zz"})); err == nil || !strings.Contains(err.Error(), `"zz"`) {
		t.Fatalf("include zz: %v", err)
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatal("a refused exclude or include changed the state")
	}
	mustApply(t, s, Include([]string{"b:2", "d:4"})) // d:4 was not excluded: no error
	if !slices.Equal(s.Excluded, []string{"a:1", "c:3"}) {
		t.Fatalf("excluded %v", s.Excluded)
	}
	mustApply(t, s, Include([]string{"all"}))
	if s.Excluded != nil {
		t.Fatalf("excluded %v after include all", s.Excluded)
	}
	mustApply(t, s, Exclude([]string{"a:1"}))
	mustApply(t, s, Include(nil))
	if s.Excluded != nil {
		t.Fatalf("excluded %v after include of nothing", s.Excluded)
	}
}

// TestExcludeFailed: an operator declares the stash at an address gone
// for good. Its slot's tag is retired and given up, and so is a tag
// retired earlier while its node was there (a stash that came back empty);
// other tags are untouched. Include takes the address back, but a tag
// given up stays given up: its data is gone either way.
func TestExcludeFailed(t *testing.T) {
	s := newTagState(t)
	register(t, s, stashNode("a", "data"), true)  // tag 3, at a:1
	register(t, s, stashNode("b", "data"), true)  // tag 4, at b:1
	register(t, s, stashNode("a", "data"), true)  // came back empty: tag 3 retired, now 5
	register(t, s, stashNode("c", "cache"), true) // tag 1
	if !s.TagRetired(3) || s.RetiredAt[3] != "a:1" || s.SlotTag("data", 0) != 5 {
		t.Fatalf("retired %v at %v, slot tags %v", s.Retired, s.RetiredAt, s.SlotTags)
	}
	// b is alive, a is not: only a's slot tag is down.
	down, live := s.DownSlotTags([]string{"a:1", "b:1", "z:9"}, func(id string) bool { return id == "b" })
	if !slices.Equal(down, []uint32{5}) || !slices.Equal(live, []string{"b:1"}) {
		t.Fatalf("down %v live %v, want [5] [b:1]", down, live)
	}
	before := s.Clone()
	if _, err := s.Apply(ExcludeFailed([]string{"nohost"}, nil)); err == nil || !strings.Contains(err.Error(), "nohost") {
		t.Fatalf("exclude --failed of a bad address: %v", err)
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatal("a refused exclude --failed changed the state")
	}
	// b:1's node is alive: its tag is not among those given, so it keeps it.
	mustApply(t, s, ExcludeFailed([]string{"a:1", "b:1", "z:9"}, []uint32{5})) // z:9: no node there, no error
	if s.TagRetired(4) || s.TagGivenUp(4) {
		t.Fatalf("the live stash's tag was given up: retired %v given up %v", s.Retired, s.GivenUp)
	}
	mustApply(t, s, Include([]string{"b:1"}))
	if !slices.Equal(s.Excluded, []string{"a:1", "z:9"}) || !slices.Equal(s.Failed, []string{"a:1", "z:9"}) {
		t.Fatalf("excluded %v failed %v", s.Excluded, s.Failed)
	}
	if !slices.Equal(s.GivenUp, []uint32{3, 5}) || !s.TagRetired(5) || s.RetiredAt[5] != "a:1" {
		t.Fatalf("given up %v, retired %v at %v: want tags 3 and 5 (a:1's, now and before)", s.GivenUp, s.Retired, s.RetiredAt)
	}
	if s.TagRetired(4) || s.TagGivenUp(4) || s.TagRetired(1) {
		t.Fatalf("another address's tags changed: retired %v given up %v", s.Retired, s.GivenUp)
	}
	again := s.Clone()
	mustApply(t, s, ExcludeFailed([]string{"a:1"}, []uint32{5}))
	if !reflect.DeepEqual(again, s) {
		t.Fatal("exclude --failed again changed the state")
	}
	// The node returns: its retired tag gives it a fresh one, not given up.
	if r := register(t, s, stashNode("a", "data"), false); r.Tag != 6 || s.TagGivenUp(6) {
		t.Fatalf("a returns: tag %d, given up %v", r.Tag, s.GivenUp)
	}
	mustApply(t, s, Include([]string{"a:1"}))
	if !slices.Equal(s.Excluded, []string{"z:9"}) || !slices.Equal(s.Failed, []string{"z:9"}) || !slices.Equal(s.GivenUp, []uint32{3, 5}) {
		t.Fatalf("after include: excluded %v failed %v given up %v", s.Excluded, s.Failed, s.GivenUp)
	}
	mustApply(t, s, Include([]string{"all"}))
	if s.Excluded != nil || s.Failed != nil {
		t.Fatalf("after include all: excluded %v failed %v", s.Excluded, s.Failed)
	}
	// The state survives its encoding.
	if d := roundTrip(t, s); !reflect.DeepEqual(d.GivenUp, s.GivenUp) || !reflect.DeepEqual(d.RetiredAt, s.RetiredAt) {
		t.Fatalf("decoded given up %v retired at %v, want %v %v", d.GivenUp, d.RetiredAt, s.GivenUp, s.RetiredAt)
	}
}

func TestConfigure(t *testing.T) {
	s := newTagState(t)
	cfg, _ := s.ParsedConfig()
	if got := s.FailureWait(cfg); got != cfg.Cluster.FailureWait.Duration {
		t.Fatalf("failure wait %v, want the configuration's", got)
	}
	mustApply(t, s, Configure(KeyFailureWait, "5s"))
	if s.FailureWaitMs == nil || *s.FailureWaitMs != 5000 || s.FailureWait(cfg).Seconds() != 5 {
		t.Fatalf("failure wait %v", s.FailureWaitMs)
	}
	mustApply(t, s, Configure(KeyFailureWait, "0s"))
	if *s.FailureWaitMs != 0 {
		t.Fatalf("failure wait %v", *s.FailureWaitMs)
	}
	mustApply(t, s, ConfigurePool("data", KeyReplication, "1"))
	if s.PoolReplication(cfg, "data") != 1 || s.PoolReplication(cfg, "cache") != 2 {
		t.Fatalf("replication %v", s.Replication)
	}
	register(t, s, stashNode("a", "data"), false)
	register(t, s, stashNode("b", "data"), false)
	register(t, s, stashNode("c", "data"), false) // the pool grows to 3 slots
	mustApply(t, s, ConfigurePool("data", KeyReplication, "3"))
	before := s.Clone()
	for _, tc := range []struct {
		c    Command
		want string
	}{
		{Configure(KeyFailureWait, "5"), `failure_wait="5"`},
		{Configure(KeyFailureWait, "-1s"), "negative"},
		{Configure("speed", "1"), `unknown key "speed"`},
		{Configure(KeyReplication, "2"), "per pool"},
		{ConfigurePool("data", KeyFailureWait, "1s"), "cluster-wide"},
		{ConfigurePool("nope", KeyReplication, "1"), "pool=nope: no such pool"},
		{ConfigurePool("data", KeyReplication, "0"), "at least 1"},
		{ConfigurePool("data", KeyReplication, "4"), "3 stash slots"},
		{ConfigurePool("cache", KeyReplication, "3"), "2 stash slots"},
		{ConfigurePool("data", KeyReplication, "two"), "not an integer"},
	} {
		if _, err := s.Apply(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.c, err, tc.want)
		}
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatal("a refused configure changed the state")
	}
	mustApply(t, s, Configure(KeyFailureWait, "default"))
	mustApply(t, s, ConfigurePool("data", KeyReplication, "default"))
	if s.FailureWaitMs != nil || s.Replication != nil {
		t.Fatalf("defaults: %v %v", s.FailureWaitMs, s.Replication)
	}
	if _, err := (&State{}).Apply(Configure(KeyFailureWait, "1s")); err == nil {
		t.Fatal("configure without a configuration accepted")
	}
}

func TestParseConfigure(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  Command
	}{
		{[]string{"failure_wait=5s"}, Configure(KeyFailureWait, "5s")},
		{[]string{"pool=data", "replication=2"}, ConfigurePool("data", KeyReplication, "2")},
		{[]string{"replication=2", "pool=data"}, ConfigurePool("data", KeyReplication, "2")},
	} {
		if c, err := ParseConfigure(tc.words); err != nil || !reflect.DeepEqual(c, tc.want) {
			t.Errorf("%q: %+v %v", tc.words, c, err)
		}
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{nil, "nothing to set"},
		{[]string{"failure_wait"}, "not KEY=VALUE"},
		{[]string{"failure_wait=soon"}, "not a duration"},
		{[]string{"speed=3"}, `unknown key "speed"`},
		{[]string{"replication=2"}, "pool=NAME"},
		{[]string{"pool=", "replication=2"}, "needs a pool name"},
		{[]string{"pool=data", "replication=0"}, "at least 1"},
		{[]string{"failure_wait=1s", "failure_wait=2s"}, "given twice"},
		{[]string{"failure_wait=1s", "pool=data"}, "alone"},
	} {
		if _, err := ParseConfigure(tc.words); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.words, err, tc.want)
		}
	}
}

// TestDecodeOldTags: a version 2 state (no slot tags) gets the
// configuration's numbering; its held slots' tags count as used. Version 2
// registrations replay as they applied then.
func TestDecodeOldTags(t *testing.T) {
	cfgText := testConfig(t, nil)
	old := &State{Config: cfgText, Generation: 3,
		Nodes: map[string]NodeInfo{"s": stashNode("s", "data")},
		Tags:  map[string][]string{"cache": {"", ""}, "data": {"", "s"}}}
	b, err := encodeJSON(2, old)
	if err != nil {
		t.Fatal(err)
	}
	st, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]uint32{"cache": {1, 2}, "data": {3, 4}}
	if !reflect.DeepEqual(st.SlotTags, want) || st.NextTag != 5 || !slices.Equal(st.UsedTags, []uint32{4}) {
		t.Fatalf("slot tags %v next %d used %v", st.SlotTags, st.NextTag, st.UsedTags)
	}
	// Version 1 without a configuration decodes as it is.
	if st, err := DecodeState([]byte(`{"v":1,"state":{"generation":1}}`)); err != nil || st.SlotTags != nil {
		t.Fatalf("version 1 state: %+v %v", st, err)
	}
	// A State built without SlotTags gets them on its first command.
	hand := &State{Config: cfgText, Tags: map[string][]string{"cache": {"", ""}, "data": {"", ""}}}
	if r := register(t, hand, stashNode("x", "cache"), false); r.Tag != 1 || hand.NextTag != 5 {
		t.Fatalf("hand-built state: %+v next %d", r, hand.NextTag)
	}

	// Version 2 registrations: a full pool refuses, a freed slot keeps its
	// tag, an empty flag does nothing (it did not exist).
	apply := func(s *State, v int, c Command) (Result, error) {
		t.Helper()
		cb, err := json.Marshal(map[string]any{"v": v, "op": c.Op, "node": c.Node, "id": c.ID, "empty": c.Empty})
		if err != nil {
			t.Fatal(err)
		}
		dc, err := decodeCommand(cb)
		if err != nil {
			t.Fatal(err)
		}
		return s.Apply(dc)
	}
	mustOld := func(s *State, c Command) Result {
		t.Helper()
		r, err := apply(s, 2, c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	mustOld(st, RegisterStash(stashNode("s2", "data"), true))
	if _, err := apply(st, 2, RegisterStash(stashNode("s3", "data"), false)); err == nil || !strings.Contains(err.Error(), "slots taken") {
		t.Fatalf("version 2 registration into a full pool: %v", err)
	}
	mustOld(st, RemoveNode("s"))
	if r := mustOld(st, RegisterStash(stashNode("s3", "data"), true)); r.Slot != 1 || r.Tag != 4 {
		t.Fatalf("version 2 registration in a freed slot: %+v", r)
	}
	// The same registration at version 3 gets a fresh tag.
	mustApply(t, st, RemoveNode("s3"))
	if r, err := apply(st, 3, RegisterStash(stashNode("s4", "data"), false)); err != nil || r.Slot != 1 || r.Tag != 5 {
		t.Fatalf("version 3 registration in a freed slot: %+v %v", r, err)
	}
	// And a new state round-trips.
	b, _ = EncodeState(st)
	if got, err := DecodeState(b); err != nil || !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, got, st)
	}
}

func encodeJSON(v int, s *State) ([]byte, error) {
	// A version 2 snapshot had none of the version 3 fields.
	return json.Marshal(map[string]any{"v": v, "state": map[string]any{
		"config": s.Config, "generation": s.Generation, "nodes": s.Nodes, "roles": s.Roles, "tags": s.Tags}})
}

// roundTrip returns s encoded and decoded again.
func roundTrip(t *testing.T, s *State) *State {
	t.Helper()
	b, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
