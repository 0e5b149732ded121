package cpu

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/distash/distash/internal/bench/timeline"
	"github.com/distash/distash/internal/bench/ycsb"
)

// us prints µs per operation with one decimal, "-" for NaN.
func us(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func fmtLatency(d time.Duration) string { return ycsb.FormatLatency(d) }

// header are the table's columns (the CSV's and the markdown's too).
var header = []string{"mode", "pool", "op", "data", "ops", "ops/s", "p50", "p99", "client µs/op", "server µs/op", "total µs/op", "errors"}

func cells(r Row) []string {
	mode := r.Mode
	if r.Round > 0 {
		mode += " r" + strconv.Itoa(r.Round)
	}
	return []string{mode, r.Pool, r.Op, r.Data(), strconv.FormatInt(r.Ops-r.Errors, 10), fmt.Sprintf("%.0f", r.OpsPerSec),
		fmtLatency(r.P50), fmtLatency(r.P99), us(r.ClientUsPerOp()), us(r.ServerUsPerOp()), us(r.TotalUsPerOp()), strconv.FormatInt(r.Errors, 10)}
}

// PrintTable prints one line per row: the figures of one (mode, pool,
// operation). Client and server µs/op are apart only in processes mode.
func PrintTable(out io.Writer, rows []Row) {
	f := "%-12s %-7s %-10s %-7s %9s %9s %9s %9s %12s %12s %11s %6s\n"
	args := func(c []string) []any {
		a := make([]any, len(c))
		for i := range c {
			a[i] = c[i]
		}
		return a
	}
	fmt.Fprintf(out, f, args(header)...)
	for _, r := range rows {
		fmt.Fprintf(out, f, args(cells(r))...)
	}
}

// writeCSV writes the rows with plain numbers (µs, ms).
func writeCSV(path string, rows []Row) error {
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return timeline.F(v, 2)
	}
	ms := func(d time.Duration) string { return timeline.F(float64(d)/float64(time.Millisecond), 3) }
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Mode, r.Pool, r.Op, r.Data(), strconv.FormatInt(r.Ops-r.Errors, 10), timeline.F(r.Seconds, 2),
			timeline.F(r.OpsPerSec, 0), ms(r.P50), ms(r.P99), num(r.ClientUsPerOp()), num(r.ServerUsPerOp()), num(r.TotalUsPerOp()),
			strconv.FormatInt(r.Errors, 10), strconv.FormatInt(r.WindowBytes, 10), strings.Join(r.Profiles, " "), strconv.Itoa(r.Round)})
	}
	return timeline.WriteCSV(path, []string{"mode", "pool", "op", "data", "ops", "seconds", "ops_per_s", "p50_ms", "p99_ms",
		"client_us_per_op", "server_us_per_op", "total_us_per_op", "errors", "window_bytes", "profiles", "round"}, recs)
}

// writeMarkdown writes the conditions and the table as markdown, ready
// for docs/benchmarks.md.
func writeMarkdown(path, conditions string, rows []Row, ratios []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n| %s |\n|%s\n", conditions, strings.Join(header, " | "), strings.Repeat("---|", 4)+strings.Repeat("---:|", len(header)-4))
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells(r), " | "))
	}
	if len(ratios) > 0 {
		b.WriteString("\n")
		for _, l := range ratios {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Ratios compares the processes mode with the embedded one, row by row
// (pool, operation, data): each round's processes ÷ embedded ops/s, in
// round order, and their median; then the same for total CPU µs per
// operation. Only rounds with both modes' row count; nil if none has.
func Ratios(rows []Row) []string {
	type key struct {
		pool, op string
		fresh    bool
		round    int
	}
	emb := map[key]Row{}
	for _, r := range rows {
		if r.Mode == ModeEmbedded {
			emb[key{r.Pool, r.Op, r.Fresh, r.Round}] = r
		}
	}
	type series struct {
		name       string
		speed, cpu []float64
	}
	var order []string
	by := map[string]*series{}
	for _, r := range rows {
		e, ok := emb[key{r.Pool, r.Op, r.Fresh, r.Round}]
		if r.Mode != ModeProcesses || !ok || e.OpsPerSec <= 0 {
			continue
		}
		name := r.Pool + " " + r.Op
		if isRead(r.Op) {
			name += " " + r.Data()
		}
		s := by[name]
		if s == nil {
			s = &series{name: name}
			by[name] = s
			order = append(order, name)
		}
		s.speed = append(s.speed, r.OpsPerSec/e.OpsPerSec)
		s.cpu = append(s.cpu, r.TotalUsPerOp()/e.TotalUsPerOp())
	}
	if len(order) == 0 {
		return nil
	}
	list := func(v []float64) string {
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
		}
		return strings.Join(parts, ", ")
	}
	lines := []string{"processes ÷ embedded, ops/s by round (median); CPU µs per operation by round (median):"}
	for _, name := range order {
		s := by[name]
		lines = append(lines, fmt.Sprintf("%s: ops/s %s (%.2f×); CPU %s (%.2f×)", s.name, list(s.speed), timeline.Median(s.speed), list(s.cpu), timeline.Median(s.cpu)))
	}
	return lines
}
