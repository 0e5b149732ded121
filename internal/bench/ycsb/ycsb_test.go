package ycsb

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOptions(t *testing.T) {
	o, err := Options{Workloads: []string{"A", "workloadc"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Workloads, ",") != "a,c" || o.Records != 20000 || o.Operations != 100000 || o.Threads != 64 ||
		o.FieldCount != 10 || o.FieldLength != 100 || o.Pools[0] != "dram" {
		t.Fatalf("defaults: %+v", o)
	}
	for _, bad := range []Options{
		{Workloads: []string{"g"}},
		{Distribution: "pareto"},
		{Peers: []string{"mysql"}},
		{Records: 10, Threads: 64},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	p := o.properties("d")
	if p.GetString("requestdistribution", "") != "latest" || p.GetString("insertproportion", "") != "0.05" {
		t.Errorf("workload d properties: %s", p)
	}
	o.Distribution = "uniform"
	if p := o.properties("d"); p.GetString("requestdistribution", "") != "uniform" {
		t.Errorf("--distribution not applied: %s", p)
	}
	if p := o.properties(Load); p.GetString("dotransactions", "") != "false" {
		t.Errorf("load properties: %s", p)
	}
}

func TestOpName(t *testing.T) {
	for _, c := range []struct {
		ops  []string
		want string
	}{
		{[]string{"READ"}, "READ"},
		{[]string{"READ", "UPDATE"}, "READ_MODIFY_WRITE"},
		{nil, "NONE"},
		{[]string{"SCAN", "SCAN"}, "SCAN+SCAN"},
	} {
		if got := opName(c.ops); got != c.want {
			t.Errorf("opName(%v) = %s, want %s", c.ops, got, c.want)
		}
	}
}

func TestPrintTable(t *testing.T) {
	var out bytes.Buffer
	PrintTable(&out, []Result{
		{Store: "distash:dram", Workload: "c", OpsPerSec: 1000, PerOp: []OpStats{{Op: "READ", Count: 10, P50: time.Millisecond, P99: 12 * time.Millisecond}}},
		{Store: "redis", Workload: "c", OpsPerSec: 2500, PerOp: []OpStats{{Op: "READ", Count: 10, P50: 300 * time.Microsecond, P99: 2 * time.Millisecond}}},
	})
	got := out.String()
	for _, want := range []string{"vs dram", "2.50×", "1.0 ms", "12 ms", "0.30 ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

// TestRepeatedWorkload: c,a,c runs C twice; the repeat is labelled c#2 in
// the results, the table and the chart, and the chart says what ran
// before each C, so "C right after the load" (data at rest) and "C after
// A" (data in the stashes' MVCC window) stay apart.
func TestRepeatedWorkload(t *testing.T) {
	o, err := Options{Workloads: []string{"c", "a", "C"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	phases := Phases(o.Workloads)
	if got := strings.Join(phases, ","); got != "load,c,a,c#2" {
		t.Fatalf("phases %s, want load,c,a,c#2", got)
	}
	var titles []string
	for i := range phases {
		titles = append(titles, PhaseTitle(phases, i))
	}
	if got := strings.Join(titles, "|"); got != "load|workload C (after load)|workload A|workload C#2 (after A)" {
		t.Errorf("titles %s", got)
	}
	if got := PhaseTitle(Phases([]string{"a", "c"}), 2); got != "workload C" {
		t.Errorf("a workload run once: %q", got)
	}
	if w := phaseWorkload("c#2"); w != "c" {
		t.Errorf("phaseWorkload(c#2) = %q", w)
	}
	if p := o.properties(phaseWorkload("c#2")); p.GetString("readproportion", "") != "1" {
		t.Errorf("c#2 does not run workload C: %s", p)
	}
	var out bytes.Buffer
	var results []Result
	for i, ph := range phases {
		for _, st := range []string{"distash:dram", "redis"} {
			ops := float64(1000 * (i + 1))
			if st == "redis" {
				ops *= 2
			}
			results = append(results, Result{Store: st, Workload: ph, OpsPerSec: ops,
				PerOp: []OpStats{{Op: "READ", Count: 10, P50: time.Millisecond, P99: 2 * time.Millisecond}}})
		}
	}
	PrintTable(&out, results)
	for _, want := range []string{"distash:dram          c#2", "redis                 c#2         8000     2.00×"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	png := filepath.Join(t.TempDir(), "ycsb.png")
	if err := Plot(png, results, o); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Fatalf("ycsb.png: %v", err)
	}
}
