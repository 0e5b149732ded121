package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// scrape fetches and parses the Prometheus metrics at addr.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sum adds the values (counter, gauge, or a histogram's count) of the
// samples of family name whose labels include match.
func sum(fams map[string]*dto.MetricFamily, name string, match ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	total := 0.0
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(match); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == match[i] && l.GetValue() == match[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// TestHTTPMetrics runs a workload through the client on both default
// pools and checks that /metrics moves with it: reads, hits and commits
// by at least the workload's counts, and the latency histograms observe.
// Bad requests get a 4xx and the server goes on serving.
func TestHTTPMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The data pool emulates an SSD (short latencies), for the device
	// metrics; the cache pool has none.
	cfg := config.Default()
	short := &config.Duration{Duration: 20 * time.Microsecond}
	cfg.Pools[1].Device = &config.Device{Profile: "ssd", ReadLatency: short, WriteLatency: short, SyncLatency: short}
	// A flash pool whose index is in far memory: the far_memory metrics.
	cfg.Pools = append(cfg.Pools, config.Pool{Name: "far", Prefix: "f/", Medium: "ssd", Mode: "durable", Engine: "flash",
		Stashes: 1, Replication: 1, Flash: &config.Flash{FarMemory: &config.Duration{Duration: 2 * time.Microsecond}}})
	srv, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: cfg, HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FlushInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	addr := srv.HTTPAddr()
	if addr == "" {
		t.Fatal("HTTPAddr is empty with HTTP on")
	}
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	before := scrape(t, addr)
	for _, name := range []string{"distash_stash_keys", "distash_stash_capacity_bytes", "distash_log_held_bytes", "distash_node_info",
		"distash_ratekeeper_reason", "go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := before[name]; !ok {
			t.Errorf("no %s in /metrics", name)
		}
	}
	// Each transaction reads a key of each pool and writes both: the first
	// pass misses in the cache pool, the second hits.
	const n = 40
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < n; i++ {
			err := db.Transact(ctx, func(tr *distash.Tx) error {
				for _, p := range []string{"c/", "d/"} {
					k := []byte(fmt.Sprintf("%sk%03d", p, i))
					if _, err := tr.Get(k); err != nil {
						return err
					}
					tr.Set(k, []byte(fmt.Sprint(pass)))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// The data distributor's figures come with its first round.
	var after map[string]*dto.MetricFamily
	wait.Until(10*time.Second, func() bool {
		after = scrape(t, addr)
		return sum(after, "distash_pool_shards") >= 0
	})
	for _, c := range []struct {
		name  string
		match []string
		min   float64
	}{
		{"distash_commits_total", nil, 2 * n},
		{"distash_stash_reads_total", []string{"pool", "cache"}, 2 * n},
		{"distash_stash_reads_total", []string{"pool", "data"}, 2 * n},
		{"distash_stash_hits_total", []string{"pool", "cache"}, n},
		{"distash_stash_misses_total", []string{"pool", "cache"}, n},
		{"distash_commit_latency_seconds", nil, 2 * n},
		{"distash_grv_latency_seconds", nil, 1},
		{"distash_stash_read_latency_seconds", []string{"pool", "cache", "medium", "dram", "mode", "ephemeral"}, 1},
		{"distash_stash_read_latency_seconds", []string{"pool", "data"}, 1},
		{"distash_commit_batch_size", nil, 1},
		{"distash_stash_keys", []string{"pool", "data"}, n},
		{"distash_stash_device_io_seconds", []string{"pool", "data", "op", "write"}, 1},
		{"distash_stash_device_io_seconds", []string{"pool", "data", "op", "sync"}, 1},
		{"distash_stash_device_written_bytes_total", []string{"pool", "data"}, n},
	} {
		b, a := sum(before, c.name, c.match...), sum(after, c.name, c.match...)
		if a < 0 {
			t.Errorf("%s%v: not in /metrics", c.name, c.match)
			continue
		}
		if b < 0 {
			b = 0
		}
		if a-b < c.min {
			t.Errorf("%s%v went from %v to %v; want an increase of at least %v", c.name, c.match, b, a, c.min)
		}
	}
	for _, m := range after["distash_stash_device_busy_ratio"].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == "pool" && l.GetValue() != "data" {
				t.Errorf("pool %s emulates no device, but /metrics has its busy ratio", l.GetValue())
			}
		}
	}
	if got := sum(after, "distash_pool_shards", "pool", "data"); got < 1 {
		t.Errorf("distash_pool_shards{pool=data} = %v, want >= 1", got)
	}
	// docs/metrics.md lists every metric, and nothing else.
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, name := range regexp.MustCompile(`distash_[a-z_]+`).FindAllString(string(doc), -1) {
		if !strings.HasSuffix(name, "_") {
			documented[strings.TrimSuffix(name, "_bucket")] = true
		}
	}
	for name := range documented {
		if _, ok := after[name]; !ok {
			t.Errorf("docs/metrics.md lists %s; /metrics has none", name)
		}
	}
	for name := range after {
		if strings.HasPrefix(name, "distash_") && !documented[name] {
			t.Errorf("/metrics has %s; docs/metrics.md does not list it", name)
		}
	}
	if got := sum(after, "distash_recoveries_total"); got != 1 {
		t.Errorf("distash_recoveries_total = %v, want 1 (the start)", got)
	}

	// The status carries recent latency percentiles.
	conn, err := grpc.NewClient(srv.ClusterString(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.CommitP99Ms <= 0 || st.CommitP50Ms <= 0 || st.CommitP50Ms > st.CommitP99Ms || st.GrvP99Ms <= 0 || st.ReadP99Ms <= 0 {
		t.Errorf("status latency: commit p50 %v p99 %v, grv p99 %v, read p99 %v ms; want positive, p50 <= p99",
			st.CommitP50Ms, st.CommitP99Ms, st.GrvP99Ms, st.ReadP99Ms)
	}

	// Bad requests: a clean 4xx each, and the server still serves.
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/no/such/page", http.StatusNotFound},
		{"POST", "/metrics", http.StatusMethodNotAllowed},
		{"DELETE", "/metrics", http.StatusMethodNotAllowed},
		{"GET", "/metrics?" + strings.Repeat("q", 100<<10), 0},
		{"GET", "/metrics?" + strings.Repeat("a=b&", 2<<10), 0},
		{"GET", "/metrics?a=%zz", http.StatusBadRequest},
		{"GET", "/?a=%", http.StatusBadRequest},
		{"GET", "/metrics;x", 0},
	} {
		req, err := http.NewRequest(c.method, "http://"+addr+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s %.40s: %v", c.method, c.path, err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 || c.want != 0 && resp.StatusCode != c.want {
			t.Errorf("%s %.40s: %s, want a 4xx (%d)", c.method, c.path, resp.Status, c.want)
		}
	}
	if fams := scrape(t, addr); sum(fams, "distash_commits_total") < 2*n {
		t.Error("after bad requests, /metrics lost the commits")
	}
}

// TestHTTPAddrTaken: an HTTP address that cannot be bound fails the start,
// unless HTTPOptional, when the server starts without HTTP.
func TestHTTPAddrTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs := &syncBuffer{}
	opts := server.Options{Dir: t.TempDir(), Config: config.Default(), HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	first, err := server.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop()
	opts.Dir, opts.HTTPAddr = t.TempDir(), first.HTTPAddr()
	if srv, err := server.Start(ctx, opts); err == nil || !strings.Contains(err.Error(), "HTTP") {
		if srv != nil {
			srv.Stop()
		}
		t.Fatalf("start on a taken HTTP address: %v; want an error", err)
	}
	opts.Dir, opts.HTTPOptional = t.TempDir(), true
	srv, err := server.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start with an optional taken HTTP address: %v", err)
	}
	srv.Stop()
	if srv.HTTPAddr() != "" || !strings.Contains(logs.String(), "no HTTP server") {
		t.Errorf("optional taken address: HTTPAddr %q; want none and a warning in the log", srv.HTTPAddr())
	}
	// Every line of an embedded cluster names its node, and the stash
	// lines their role.
	lines := logLines(t, logs)
	roles := map[string]bool{}
	for _, l := range lines {
		if l["node"] != "embedded" || l["generation"] != 0.0 {
			t.Fatalf("log line without node=embedded and generation=0: %v", l)
		}
		if r, ok := l["role"].(string); ok {
			roles[r] = true
		}
	}
	if len(lines) == 0 || len(roles) == 0 {
		t.Errorf("%d log lines, with roles %v; want lines with a role", len(lines), roles)
	}
	t.Logf("%d log lines, roles %v", len(lines), roles)
}

// logLines decodes the JSON log lines of b.
func logLines(t *testing.T, b *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

const oneCacheTOML = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
capacity = "16MiB"
`

// TestClusterNodeMetricsAndLogs: every node of a multi-process cluster serves its
// own metrics (a stash node its stash's, the roles' node the commits and
// the log), and its log lines carry its node id, the current generation
// and the role that logs.
func TestClusterNodeMetricsAndLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	c := newLayoutCluster(t, oneCacheTOML, "tx1 transaction", "cache1 stash cache")
	logs := &syncBuffer{}
	c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c.HTTPAddr = "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)
	const n = 30
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < n; i++ {
			err := db.Transact(ctx, func(tr *distash.Tx) error {
				k := []byte(fmt.Sprintf("c/k%03d", i))
				if _, err := tr.Get(k); err != nil {
					return err
				}
				tr.Set(k, []byte("v"))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	stashNode, txNode := c.Node("cache1").Server(), c.Node("tx1").Server()
	// The stash node's figures: its stash, with the workload's reads and
	// hits; its lag once it reported to the log's node.
	{
		var fams map[string]*dto.MetricFamily
		if !wait.Until(10*time.Second, func() bool {
			fams = scrape(t, stashNode.HTTPAddr())
			return sum(fams, "distash_stash_version_lag_seconds", "pool", "cache") >= 0
		}) {
			t.Error("the stash node has no distash_stash_version_lag_seconds")
		}
		if got := sum(fams, "distash_stash_reads_total", "pool", "cache", "medium", "dram", "mode", "ephemeral"); got < 2*n {
			t.Errorf("stash node: distash_stash_reads_total = %v, want >= %d", got, 2*n)
		}
		if got := sum(fams, "distash_stash_hits_total", "pool", "cache"); got < n {
			t.Errorf("stash node: distash_stash_hits_total = %v, want >= %d", got, n)
		}
		if got := sum(fams, "distash_stash_read_latency_seconds", "pool", "cache"); got < 1 {
			t.Errorf("stash node: read latency histogram count %v", got)
		}
		if got := sum(fams, "distash_node_role", "role", "stash"); got != 1 {
			t.Errorf("stash node: distash_node_role{role=stash} = %v", got)
		}
		if got := sum(fams, "distash_commits_total"); got != -1 {
			t.Errorf("stash node reports commits (%v): it holds no proxy", got)
		}
	}
	// The log's tag set comes from the roles' node once the stashes
	// joined (keepLogTags): until then it holds for no tag.
	var fams map[string]*dto.MetricFamily
	wait.Until(10*time.Second, func() bool {
		fams = scrape(t, txNode.HTTPAddr())
		return sum(fams, "distash_log_held_entries") >= 0
	})
	if got := sum(fams, "distash_commits_total"); got < 2*n {
		t.Errorf("roles' node: distash_commits_total = %v, want >= %d", got, 2*n)
	}
	if got := sum(fams, "distash_commit_latency_seconds"); got < 2*n {
		t.Errorf("roles' node: commit latency count %v, want >= %d", got, 2*n)
	}
	if sum(fams, "distash_log_held_entries") < 0 || sum(fams, "distash_node_generation") < 1 || sum(fams, "distash_recoveries_total") < 1 {
		t.Errorf("roles' node: log held %v, generation %v, recoveries %v", sum(fams, "distash_log_held_entries"),
			sum(fams, "distash_node_generation"), sum(fams, "distash_recoveries_total"))
	}

	// Every log line names its node; the generation is the one current
	// when the line was written; roles say who logs.
	ids := map[string]bool{stashNode.NodeID(): true, txNode.NodeID(): true}
	roles := map[string]bool{}
	maxGen := 0.0
	for _, l := range logLines(t, logs) {
		id, _ := l["node"].(string)
		gen, ok := l["generation"].(float64)
		if !ids[id] || !ok {
			t.Fatalf("log line without a node id of the cluster and a generation: %v", l)
		}
		maxGen = max(maxGen, gen)
		if r, ok := l["role"].(string); ok {
			roles[r] = true
			if r == "sequencer" && strings.HasPrefix(l["msg"].(string), "recovered") && gen < 1 {
				t.Errorf("recovery line with generation %v: %v", gen, l)
			}
		}
	}
	if maxGen < 1 || !roles["sequencer"] || !roles["log"] {
		t.Errorf("log lines: highest generation %v, roles %v; want >= 1, sequencer and log", maxGen, roles)
	}
}

// TestGrafanaDashboard: docs/grafana-dashboard.json is valid JSON, takes
// its Prometheus data source from a variable, and queries only metrics
// docs/metrics.md lists (TestHTTPMetrics checks those exist).
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct{ Name, Type, Query string }
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if len(dash.Templating.List) == 0 || dash.Templating.List[0].Type != "datasource" || dash.Templating.List[0].Query != "prometheus" {
		t.Errorf("no Prometheus data source variable: %+v", dash.Templating.List)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`distash_[a-z_]+`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				if !strings.Contains(string(doc), "`"+strings.TrimSuffix(m, "_bucket")+"`") {
					t.Errorf("panel %q queries %s, which docs/metrics.md does not list", p.Title, m)
				}
			}
		}
	}
}

// TestHTTPPprof: with Options.Pprof the HTTP server serves Go's CPU
// profile (a gzipped protobuf) at /debug/pprof/profile; without it, that
// path is no profile.
func TestHTTPPprof(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	get := func(pprof bool) (int, []byte) {
		srv, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: config.Default(), HTTPAddr: "127.0.0.1:0", Pprof: pprof,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		resp, err := http.Get("http://" + srv.HTTPAddr() + "/debug/pprof/profile?seconds=1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	code, b := get(true)
	if code != http.StatusOK || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("with Pprof: %d, %d bytes starting %q; want 200 and a gzipped profile", code, len(b), b[:min(len(b), 16)])
	}
	if code, b := get(false); code == http.StatusOK && len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		t.Fatalf("without Pprof: %d and a profile", code)
	}
}
