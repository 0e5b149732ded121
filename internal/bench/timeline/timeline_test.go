package timeline

import (
	"math"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot/plotter"

	"github.com/distash/distash/internal/wire"
)

func status(committed int64, busy float64, read, written int64) *wire.StatusResponse {
	return &wire.StatusResponse{CommittedVersion: committed, RateLimit: 100, Stashes: []*wire.StashStatus{
		{Pool: "ssd", Index: 0, DurableVersion: committed - 2_000_000, WindowBytes: 3 << 20,
			Device: &wire.DeviceStatus{BusySeconds: busy, QueueLength: 3, ReadBytes: read, WrittenBytes: written, ReadP99Us: 800}},
		{Pool: "dram", Index: 0, DurableVersion: committed},
	}}
}

// TestUtilisationFromBusySeconds: utilisation is the busy seconds'
// difference over the interval, rates the bytes' differences; a stash
// without a device, and the first sample, have none.
func TestUtilisationFromBusySeconds(t *testing.T) {
	first := sampleOf(status(10_000_000, 4.0, 0, 0), 1, nil, 0)
	prev := map[string]StashPoint{}
	for _, p := range first.Stashes {
		prev[p.Stash] = p
		if !math.IsNaN(p.BusyPct) {
			t.Fatalf("first sample has a utilisation: %+v", p)
		}
	}
	s := sampleOf(status(12_000_000, 4.5, 1<<20, 4<<20), 3, prev, 1)
	if len(s.Stashes) != 2 || s.Stashes[0].Stash != "dram-0" || s.Stashes[1].Stash != "ssd-0" {
		t.Fatalf("stashes %+v", s.Stashes)
	}
	d, m := s.Stashes[0], s.Stashes[1]
	if !math.IsNaN(d.BusyPct) || d.DurableLagS != 0 {
		t.Fatalf("DRAM stash: %+v", d)
	}
	if m.BusyPct != 25 || m.ReadMiBs != 0.5 || m.WriteMiBs != 2 || m.QueueLength != 3 || m.ReadP99Ms != 0.8 || m.DurableLagS != 2 {
		t.Fatalf("SSD stash: %+v", m)
	}
	if got := MeanBusy([]Sample{first, s}, nil); got != 25 {
		t.Fatalf("MeanBusy = %v", got)
	}
	// The CSV holds the SSD stash's row only, and reads back.
	path := filepath.Join(t.TempDir(), "u.csv")
	if err := WriteCSV(path, UtilisationHeader("run"), UtilisationRows([]Sample{first, s}, nil, "a")); err != nil {
		t.Fatal(err)
	}
	rows, err := ReadCSV(path, UtilisationHeader("run"), "time_s", "busy_pct", "read_mib_s")
	if err != nil || len(rows) != 1 || rows[0][2] != "ssd-0" || rows[0][3] != "25.0" {
		t.Fatalf("rows %q, %v", rows, err)
	}
	if _, err := ReadCSV(path, UtilisationHeader("other")); err == nil {
		t.Fatal("a wrong header passed")
	}
	if err := Plot(filepath.Join(t.TempDir(), "u.png"), Chart{Title: "t"}, []Line{{Name: "gap", XY: plotter.XYs{{X: 0, Y: 1}, {X: 1, Y: math.NaN()}, {X: 2, Y: 3}}}}); err != nil {
		t.Fatal(err)
	}
}
