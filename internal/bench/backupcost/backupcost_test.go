package backupcost

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunAlternates: a short run measures a phase without a backup, the
// backup's snapshot and a phase with it copying the log, each with
// committed writes, and prints the summary. (It checks the harness, not
// the figures: those need a quiet machine and longer phases.)
func TestRunAlternates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	res, err := Run(ctx, Options{Clients: 4, Keys: 500, Phase: 300 * time.Millisecond, Rounds: 1, Dir: t.TempDir()}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var kinds []string
	for _, p := range res.Phases {
		kinds = append(kinds, p.Kind)
		if p.Kind != "snapshot" && (p.Ops == 0 || p.P99 < p.P50) {
			t.Errorf("phase %+v", p)
		}
	}
	if strings.Join(kinds, ",") != "off,snapshot,on" || res.OffOps == 0 || res.OnOps == 0 || !strings.Contains(out.String(), "median over phases") {
		t.Errorf("phases %v, result %+v\n%s", kinds, res, out.String())
	}
	t.Log(out.String())
}
