package coord

import (
	"slices"
	"strings"
	"testing"
)

func txNodes(specs ...string) *State {
	// spec: id/dc/zone/machine
	s := &State{Nodes: map[string]NodeInfo{}}
	for _, sp := range specs {
		f := strings.Split(sp, "/")
		s.Nodes[f[0]] = NodeInfo{ID: f[0], Addr: f[0] + ":1", Class: ClassTransaction, DC: f[1], Zone: f[2], Machine: f[3]}
	}
	s.Nodes["st"] = NodeInfo{ID: "st", Addr: "st:1", Class: ClassStash, Pool: "data", DC: "dc1", Zone: "z9"}
	return s
}

func all(string) bool { return true }

func zonesOf(s *State, ids []string) map[string]int {
	z := map[string]int{}
	for _, id := range ids {
		n := s.Nodes[id]
		z[n.DC+"/"+n.Zone]++
	}
	return z
}

func TestRecruitSpreadsZones(t *testing.T) {
	s := txNodes("a/dc1/z1/m1", "b/dc1/z1/m2", "c/dc1/z2/m3", "d/dc2/z1/m4", "e/dc2/z2/m5")
	r, warns, err := Recruit(s, all, 3, "b")
	if err != nil || len(warns) != 0 {
		t.Fatalf("err %v warnings %v", err, warns)
	}
	if len(r.LogReplicas) != 3 || len(zonesOf(s, r.LogReplicas)) != 3 {
		t.Fatalf("log replicas %v not in 3 zones", r.LogReplicas)
	}
	if r.Sequencer != "b" || r.Resolver != "b" || !slices.Equal(r.CommitProxies, []string{"b"}) || !slices.Equal(r.GRVProxies, []string{"b"}) {
		t.Fatalf("stateless roles %+v, want on self b", r)
	}
	if slices.Contains(r.LogReplicas, "st") {
		t.Fatal("a stash node got a log replica")
	}
}

func TestRecruitFewZones(t *testing.T) {
	s := txNodes("a/dc1/z1/m1", "b/dc1/z1/m1", "c/dc1/z1/m2", "d/dc1/z2/m3")
	r, warns, err := Recruit(s, all, 3, "zz") // self is not a node
	if err != nil {
		t.Fatal(err)
	}
	if len(r.LogReplicas) != 3 || len(zonesOf(s, r.LogReplicas)) != 2 {
		t.Fatalf("log replicas %v", r.LogReplicas)
	}
	// The second replica of z1 goes to another machine than the first.
	if slices.Contains(r.LogReplicas, "a") && slices.Contains(r.LogReplicas, "b") {
		t.Fatalf("log replicas %v share machine m1 while m2 is free", r.LogReplicas)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "only 2 distinct zones") {
		t.Fatalf("warnings %v", warns)
	}
	if r.Sequencer != "a" {
		t.Fatalf("sequencer %s, want the first live node a", r.Sequencer)
	}
}

func TestRecruitLivenessAndStability(t *testing.T) {
	s := txNodes("a/dc1/z1/", "b/dc1/z2/", "c/dc1/z3/", "d/dc1/z4/")
	s.Roles.LogReplicas = []string{"d", "c", "b"}
	dead := map[string]bool{"c": true}
	alive := func(id string) bool { return !dead[id] }
	r, _, err := Recruit(s, alive, 3, "c")
	if err != nil {
		t.Fatal(err)
	}
	// Previous holders d and b stay; the dead c is replaced by a.
	got := slices.Sorted(slices.Values(r.LogReplicas))
	if !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("log replicas %v, want a b d", r.LogReplicas)
	}
	if r.Sequencer == "c" {
		t.Fatal("the stateless roles went to dead self")
	}
	_, warns, _ := Recruit(s, func(id string) bool { return id == "a" }, 3, "")
	if len(warns) == 0 || !strings.Contains(warns[0], "only 1 live transaction nodes") {
		t.Fatalf("warnings %v", warns)
	}
	if _, _, err := Recruit(s, func(string) bool { return false }, 3, ""); err == nil {
		t.Fatal("no live node: no error")
	}
}
