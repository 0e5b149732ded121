package coord

import (
	"errors"
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
	if _, err := s.Apply(RegisterNode(stash("s3", "data"))); err == nil || !strings.Contains(err.Error(), "slots taken") {
		t.Fatalf("third stash of a 2-stash pool: err = %v", err)
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
	if s.Slot("data", "s2") != 1 || len(s.Nodes) != 3 {
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
	if _, err := DecodeState([]byte(`{"v":2,"state":{}}`)); err == nil {
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
