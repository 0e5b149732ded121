package coord

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/distash/distash/config"
)

// testConfig returns the TOML of the default configuration with 3 log
// replicas, changed by edit if not nil.
func testConfig(t testing.TB, edit func(*config.Config)) string {
	t.Helper()
	c := config.Default()
	c.Log.Replicas = 3
	if edit != nil {
		edit(c)
	}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustApply(t *testing.T, s *State, c Command) Result {
	t.Helper()
	r, err := s.Apply(c)
	if err != nil {
		t.Fatalf("%s: %v", c.Op, err)
	}
	return r
}

func TestSetConfigFirstWriteWins(t *testing.T) {
	s := &State{}
	first := testConfig(t, nil)
	mustApply(t, s, SetConfig(first))
	if got := len(s.Tags["cache"]); got != 2 {
		t.Fatalf("cache slots = %d, want 2", got)
	}
	// Same layout, other capacity: accepted, the first text stays.
	mustApply(t, s, SetConfig(testConfig(t, func(c *config.Config) { c.Pools[0].Capacity *= 2 })))
	if s.Config != first {
		t.Fatal("a later SetConfig replaced the first configuration")
	}
	// Another layout: refused, naming the field, state unchanged.
	before := s.Clone()
	_, err := s.Apply(SetConfig(testConfig(t, func(c *config.Config) { c.Pools[1].Replication = 1 })))
	var fe *config.FieldError
	if !errors.As(err, &fe) || !strings.HasSuffix(fe.Field, "replication") {
		t.Fatalf("err = %v, want a FieldError naming replication", err)
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatal("a refused SetConfig changed the state")
	}
	if _, err := s.Apply(SetConfig("[[pool]]\nname = 1\n")); err == nil {
		t.Fatal("an invalid configuration was accepted")
	}
}

func TestRegisterNode(t *testing.T) {
	s := &State{}
	stash := func(id, pool string) NodeInfo {
		return NodeInfo{ID: id, Addr: id + ":1", Class: ClassStash, Pool: pool, DC: "dc1", Zone: "z1"}
	}
	if _, err := s.Apply(RegisterNode(stash("s1", "data"))); err == nil {
		t.Fatal("registration before a configuration was accepted")
	}
	mustApply(t, s, SetConfig(testConfig(t, nil)))
	if r := mustApply(t, s, RegisterNode(stash("s1", "data"))); r.Slot != 0 {
		t.Fatalf("s1 slot %d, want 0", r.Slot)
	}
	if r := mustApply(t, s, RegisterNode(stash("s2", "data"))); r.Slot != 1 {
		t.Fatalf("s2 slot %d, want 1", r.Slot)
	}
	// A third stash of a 2-stash pool: the pool grows (TestRegisterRules).
	if r := mustApply(t, s, RegisterNode(stash("s5", "data"))); r.Slot != 2 {
		t.Fatalf("third stash of a 2-stash pool: slot %d, want a new slot 2", r.Slot)
	}
	// Idempotent, and a returning node keeps its slot on a new address.
	n := stash("s2", "data")
	n.Addr = "elsewhere:2"
	if r := mustApply(t, s, RegisterNode(n)); r.Slot != 1 || s.Nodes["s2"].Addr != "elsewhere:2" {
		t.Fatalf("re-registered s2: slot %d addr %s", r.Slot, s.Nodes["s2"].Addr)
	}
	// Removing frees the slot for a newcomer.
	mustApply(t, s, RemoveNode("s1"))
	if r := mustApply(t, s, RegisterNode(stash("s3", "data"))); r.Slot != 0 {
		t.Fatalf("s3 slot %d, want the freed 0", r.Slot)
	}
	bad := []NodeInfo{
		stash("s4", "nope"),
		{ID: "t1", Addr: "a", Class: ClassTransaction, Pool: "data"},
		{ID: "t1", Addr: "a", Class: "storage"},
		{ID: "", Addr: "a", Class: ClassTransaction},
		{ID: "s2", Addr: "a", Class: ClassStash, Pool: "cache"}, // changes pool
	}
	for _, b := range bad {
		if _, err := s.Apply(RegisterNode(b)); err == nil {
			t.Errorf("%+v accepted", b)
		}
	}
	mustApply(t, s, RegisterNode(NodeInfo{ID: "t1", Addr: "a", Class: ClassTransaction}))
	if s.Slot("data", "s2") != 1 || len(s.Nodes) != 4 {
		t.Fatalf("state %+v", s)
	}
}

func TestNewGeneration(t *testing.T) {
	s := &State{}
	r := mustApply(t, s, NewGeneration(0, Roles{Controller: "c1", Sequencer: "t1"}))
	if r.Generation != 1 || s.Roles.Sequencer != "t1" {
		t.Fatalf("generation %d roles %+v", r.Generation, s.Roles)
	}
	if _, err := s.Apply(NewGeneration(0, Roles{Controller: "c2"})); !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("stale from: err = %v", err)
	}
	if _, err := s.Apply(NewGeneration(1, Roles{})); err == nil {
		t.Fatal("a generation without a controller was accepted")
	}
	mustApply(t, s, NewGeneration(1, Roles{Controller: "c2"}))
	if s.Generation != 2 || s.Roles.Controller != "c2" {
		t.Fatalf("state %+v", s)
	}
}

func TestEncoding(t *testing.T) {
	s := &State{}
	mustApply(t, s, SetConfig(testConfig(t, nil)))
	mustApply(t, s, RegisterNode(NodeInfo{ID: "s1", Addr: "x:1", Class: ClassStash, Pool: "cache", Zone: "z"}))
	mustApply(t, s, NewGeneration(0, Roles{Controller: "c", LogReplicas: []string{"a", "b"}}))
	b, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeState(b)
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, got, s)
	}
	if _, err := DecodeState([]byte(fmt.Sprintf(`{"v":%d,"state":{}}`, snapshotVersion+1))); err == nil {
		t.Fatal("unknown state version accepted")
	}
	cb, _ := encodeCommand(RemoveNode("x"))
	if c, err := decodeCommand(cb); err != nil || c.Op != OpRemoveNode || c.ID != "x" {
		t.Fatalf("command round trip: %+v %v", c, err)
	}
	if _, err := decodeCommand([]byte(`{"v":9,"op":"remove_node"}`)); err == nil {
		t.Fatal("unknown command version accepted")
	}
}

func TestClaimAndRecoveryDone(t *testing.T) {
	s := &State{}
	mustApply(t, s, SetConfig(testConfig(t, nil)))
	for _, id := range []string{"a", "b", "c", "d"} {
		mustApply(t, s, RegisterNode(NodeInfo{ID: id, Addr: id + ":1", Class: ClassTransaction}))
	}
	mustApply(t, s, RegisterNode(NodeInfo{ID: "s", Addr: "s:1", Class: ClassStash, Pool: "data"}))
	mustApply(t, s, NewGeneration(0, Roles{Controller: "c1", LogReplicas: []string{"a", "b", "c"}}))

	before := s.Clone()
	for _, tc := range []struct{ id, want string }{
		{"d", "holds none of the log replicas"}, {"s", "is a stash node"}, {"zz", "not registered"},
	} {
		if _, err := s.Apply(Claim(1, "c1", tc.id, 5)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("claim by %s: %v, want %q", tc.id, err, tc.want)
		}
	}
	if _, err := s.Apply(Claim(1, "c1", "d", 5)); !errors.Is(err, ErrNotLogReplica) {
		t.Fatalf("claim by a non-replica: %v", err)
	}
	if _, err := s.Apply(Claim(0, "c1", "a", 5)); !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("stale claim: %v", err)
	}
	if !reflect.DeepEqual(before, s) {
		t.Fatal("a refused claim changed the state")
	}

	r := mustApply(t, s, Claim(1, "c1", "b", 1234))
	want := Roles{Controller: "c1", Sequencer: "b", GRVProxies: []string{"b"}, CommitProxies: []string{"b"}, Resolver: "b", LogReplicas: []string{"a", "b", "c"}}
	if r.Generation != 2 || !reflect.DeepEqual(s.Roles, want) || *s.Recovery != (Recovery{Generation: 2, Node: "b", ClaimedUnixMs: 1234}) {
		t.Fatalf("after the claim: generation %d, roles %+v, recovery %+v", r.Generation, s.Roles, s.Recovery)
	}
	// Reports of another node or generation are ignored.
	mustApply(t, s, RecoveryDone("a", 2, 7))
	mustApply(t, s, RecoveryDone("b", 1, 7))
	if s.Recovery.Micros != 0 {
		t.Fatalf("a stray report was recorded: %+v", s.Recovery)
	}
	// A controller change keeps the roles and the claim; the claimer's
	// report of its generation is still recorded.
	mustApply(t, s, NewGeneration(2, want))
	mustApply(t, s, RecoveryDone("b", 2, 900))
	if s.Recovery == nil || s.Recovery.Micros != 900 || s.Generation != 3 {
		t.Fatalf("recovery %+v at generation %d", s.Recovery, s.Generation)
	}
	// Round trip through the encodings.
	b, _ := EncodeState(s)
	if got, err := DecodeState(b); err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: %v", err)
	}
	cb, _ := encodeCommand(Claim(3, "c1", "a", 99))
	if c, err := decodeCommand(cb); err != nil || c.Op != OpClaim || c.ID != "a" || c.UnixMs != 99 || c.From != 3 {
		t.Fatalf("claim command round trip: %+v %v", c, err)
	}
	// Roles moving elsewhere drop the claim.
	mustApply(t, s, NewGeneration(3, Roles{Controller: "c1", Sequencer: "a", LogReplicas: want.LogReplicas}))
	if s.Recovery != nil {
		t.Fatalf("recovery %+v kept after the roles moved", s.Recovery)
	}
}

// TestDecodeVersion1: encodings written before version 2 still decode.
func TestDecodeVersion1(t *testing.T) {
	st, err := DecodeState([]byte(`{"v":1,"state":{"config":"","generation":4,"nodes":{"a":{"id":"a","addr":"a:1","class":"transaction"}},"roles":{"controller":"c","log_replicas":["a"]}}}`))
	if err != nil || st.Generation != 4 || st.Recovery != nil || st.Roles.LogReplicas[0] != "a" || st.Nodes["a"].Addr != "a:1" {
		t.Fatalf("version 1 state: %+v %v", st, err)
	}
	c, err := decodeCommand([]byte(`{"v":1,"op":"new_generation","from":4,"roles":{"controller":"c"}}`))
	if err != nil || c.Op != OpNewGeneration || c.From != 4 || c.Roles.Controller != "c" {
		t.Fatalf("version 1 command: %+v %v", c, err)
	}
}
