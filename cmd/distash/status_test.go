package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/distash/distash/internal/version"
	"github.com/distash/distash/internal/wire"
)

// TestStatusShowsEngineCounters: stashes whose engine reports counters (the
// flash engine) get a line of them under the stash table; others none.
func TestStatusShowsEngineCounters(t *testing.T) {
	st := &wire.StatusResponse{
		Log: &wire.LogStatus{Replicas: 1},
		Pools: []*wire.PoolInfo{
			{Name: "cache", Prefix: []byte("c/"), Medium: "dram", Mode: "ephemeral", Engine: "memory", Stashes: 1, Replication: 1},
			{Name: "data", Prefix: []byte("d/"), Medium: "ssd", Mode: "durable", Engine: "flash", Stashes: 1, Replication: 1},
		},
		Stashes: []*wire.StashStatus{
			{Id: 1, Pool: "cache", Index: 0, Health: "healthy"},
			{Id: 2, Pool: "data", Index: 0, Health: "restarting", Restarts: 2, LastError: "flash: bad frame", EngineCounters: []*wire.EngineCounter{
				{Name: "segments", Value: 3}, {Name: "log_bytes", Value: 121 << 20}, {Name: "cache_hits", Value: 42},
			}},
		},
	}
	var out bytes.Buffer
	printStatusTo(&out, st)
	got := out.String()
	want := "Engine counters:\n  data-0 (flash): segments 3, log bytes 121 MiB, cache hits 42\n"
	if !strings.HasSuffix(got, want) {
		t.Fatalf("status ends:\n%s\nwant it to end with:\n%s", got, want)
	}
	if !strings.Contains(got, "restarting (2 restarts)") || !strings.Contains(got, "data-0 is restarting; last failure: flash: bad frame") {
		t.Fatalf("status does not show the failing stash:\n%s", got)
	}
	if strings.Contains(got, "cache-0 (") {
		t.Fatalf("a memory stash got an engine line:\n%s", got)
	}
}

// TestStatusShowsDevices: a stash that emulates a device gets a line of
// its figures; others none.
func TestStatusShowsDevices(t *testing.T) {
	st := &wire.StatusResponse{
		Log: &wire.LogStatus{Replicas: 1},
		Pools: []*wire.PoolInfo{
			{Name: "cache", Prefix: []byte("c/"), Medium: "dram", Mode: "ephemeral", Engine: "memory", Stashes: 1, Replication: 1},
			{Name: "data", Prefix: []byte("d/"), Medium: "ssd", Mode: "durable", Engine: "pebble", Stashes: 1, Replication: 1},
		},
		Stashes: []*wire.StashStatus{
			{Id: 1, Pool: "cache", Index: 0, Health: "healthy"},
			{Id: 2, Pool: "data", Index: 0, Health: "healthy", Device: &wire.DeviceStatus{Profile: "ssd", BusyFraction: 0.625,
				QueueLength: 5, InService: 3, Reads: 10, ReadBytes: 40960, Writes: 2, WrittenBytes: 1 << 20, Syncs: 1,
				ReadP50Us: 81.4, ReadP99Us: 250, WriteP99Us: 101, SyncP99Us: 1000}},
		},
	}
	var out bytes.Buffer
	printStatusTo(&out, st)
	got := out.String()
	want := "Emulated devices:\n  data-0 (ssd): 62% busy, queue 5 (3 in service), 10 reads 40 KiB, 2 writes 1.0 MiB, 1 syncs; read p50 81µs p99 250µs, write p99 101µs, sync p99 1ms\n"
	if !strings.HasSuffix(got, want) {
		t.Fatalf("status ends:\n%s\nwant it to end with:\n%s", got, want)
	}
	if strings.Contains(got, "cache-0 (") {
		t.Fatalf("a stash without a device got a device line:\n%s", got)
	}
}

// TestStatusJSON: `cli status json` prints the status document of
// docs/status.md: schema 1, integers as JSON numbers, prefixes as
// printable strings (internal/statusjson tests the rest).
func TestStatusJSON(t *testing.T) {
	clearTLSEnv(t)
	addr := startServerInProcess(t, "--http", "off")
	out, err := run(cliCmd(), "status", "json", "--cluster", addr)
	if err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	var doc struct {
		Schema           int
		CommittedVersion int64
		Pools            []struct{ Name, Prefix string }
		Stashes          []struct{ Keys, Bytes int64 }
		// The process's protocol range and build (an embedded cluster).
		ProtocolMin, ProtocolMax int
		BuildVersion             string
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status json is not the document of docs/status.md: %v\n%s", err, out)
	}
	if doc.Schema != 1 || doc.CommittedVersion <= 0 || len(doc.Pools) != 2 || doc.Pools[0].Prefix != "c/" || len(doc.Stashes) == 0 {
		t.Fatalf("status json: %+v\n%s", doc, out)
	}
	if doc.ProtocolMin != version.MinProtocol || doc.ProtocolMax != version.Protocol || doc.BuildVersion != version.Current().Version {
		t.Errorf("status json: protocol %d-%d, build %q; want %d-%d, %q", doc.ProtocolMin, doc.ProtocolMax, doc.BuildVersion,
			version.MinProtocol, version.Protocol, version.Current().Version)
	}
	if out, err := run(cliCmd(), "status", "--cluster", addr); err != nil || !strings.Contains(out, fmt.Sprintf("protocol %d-%d   build %s", version.MinProtocol, version.Protocol, version.Current().Version)) {
		t.Errorf("status does not print the protocol range and build: %v\n%s", err, out)
	}
	if _, err := run(cliCmd(), "status", "yaml", "--cluster", addr); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("status yaml: %v", err)
	}
}

// TestStatusSaysQuorumIsLost: warnings come first, and a view no
// controller vouches for is marked stale with its age and the
// coordinator it comes from.
func TestStatusSaysQuorumIsLost(t *testing.T) {
	st := &wire.StatusResponse{
		Nodes:                 []*wire.NodeStatus{{Id: "n-1", Address: "a:1", Class: "transaction", Health: "alive"}},
		Generation:            7,
		ViewStale:             true,
		ViewAgeMs:             12300,
		ViewFrom:              "a:1",
		Warnings:              []string{"the coordinators have no quorum: 1 of 3 members answer", "the log has no quorum: 1 of 3 replicas alive: commits cannot be made"},
		CoordinatorMembership: &wire.MembershipStatus{Configured: 3, Members: 3, Alive: 1},
		LogMembership:         &wire.MembershipStatus{Configured: 3, Members: 3, Alive: 1},
	}
	var out bytes.Buffer
	printStatusTo(&out, st)
	got := out.String()
	for _, want := range []string{
		"WARNING: the coordinators have no quorum: 1 of 3 members answer\nWARNING: the log has no quorum: 1 of 3 replicas alive: commits cannot be made\n",
		"STALE VIEW (no controller): a:1's copy, 12.3s old\n",
		"coordinators 1/3 answering (NO QUORUM)   log 1/3 alive (NO QUORUM)",
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("status lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasPrefix(got, "WARNING: ") {
		t.Fatalf("status does not start with its warnings:\n%s", got)
	}
}
