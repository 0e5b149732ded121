package ycsb

import (
	"bytes"
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
