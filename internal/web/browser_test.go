package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/server"
)

// Environment variables of TestConsoleInBrowser.
const (
	// envChromium names the browser binary; default: the first of
	// chromiumNames on $PATH.
	envChromium = "DISTASH_CHROMIUM"
	// envScreenshot, if set, is where the test saves a PNG of the console
	// under load (a path relative to internal/web, or absolute;
	// docs/img/console.png was made so, docs/development.md), after
	// envScreenshotAfter (a duration, default 5s) of load.
	envScreenshot      = "DISTASH_CONSOLE_SCREENSHOT"
	envScreenshotAfter = "DISTASH_CONSOLE_SCREENSHOT_AFTER"
)

var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// findChromium returns the browser binary, or "" if there is none.
func findChromium() string {
	if p := os.Getenv(envChromium); p != "" {
		return p
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// statusDoc is the part of the status document the test compares with
// the page. Decoding into int64 also checks that the figures are JSON
// numbers.
type statusDoc struct {
	Schema int
	Pools  []struct {
		Name, Prefix, Mode string
	}
	Stashes []struct {
		ID                                          uint32 `json:"id"`
		Pool                                        string
		Keys, Bytes, Reads, Hits, Misses, Evictions int64
	}
}

// pageState is what the test reads from the page: the tables' rows (the
// raw figures behind each cell, data-field → data-value) and the charts.
type pageState struct {
	Polls, Errors     int
	LastError         string
	Pools, Stashes    []map[string]string
	TpsPoints         int
	TpsMax            float64
	ConflictsPoints   int
	HitRatePools      []string
	HitRatePoints     int
	P99Now            string
	StateText, Header string
}

const readPage = `(() => {
	const rows = sel => Array.from(document.querySelectorAll(sel)).map(tr => {
		const m = {};
		for (const [k, v] of Object.entries(tr.dataset)) m[k] = v;
		for (const td of tr.querySelectorAll('td[data-field]')) m[td.dataset.field] = td.dataset.value !== undefined ? td.dataset.value : td.textContent;
		return m;
	});
	const c = window.distashConsole || {polls: 0, errors: 0, lastError: '', series: {hitRate: {}}};
	const fig = id => document.getElementById(id);
	const hr = Object.keys(c.series.hitRate);
	return {
		polls: c.polls, errors: c.errors, lastError: c.lastError,
		pools: rows('#pools tbody tr'), stashes: rows('#stashes tbody tr'),
		tpsPoints: +(fig('chart-tps').dataset.points || 0), tpsMax: +(fig('chart-tps').dataset.max || 0),
		conflictsPoints: +(fig('chart-conflicts').dataset.points || 0),
		hitRatePools: hr, hitRatePoints: hr.length ? c.series.hitRate[hr[0]].length : 0,
		p99Now: fig('chart-p99').querySelector('[data-now]').textContent,
		stateText: document.getElementById('state').textContent,
		header: document.getElementById('summary').textContent,
	};
})()`

// TestConsoleInBrowser loads the console of an embedded cluster under a
// workload in headless Chromium: no console error nor exception, every
// pool and stash shown with the figures of status json, and charts that
// move while the workload runs.
func TestConsoleInBrowser(t *testing.T) {
	chromium := findChromium()
	if chromium == "" {
		t.Skipf("no Chromium found (tried %s, or set %s): install Debian's chromium package (.ci/run does) to run the web console's browser test",
			strings.Join(chromiumNames, ", "), envChromium)
	}
	shot, shotAfter := screenshotOptions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second+shotAfter)
	defer cancel()

	// An embedded cluster serving its console, as `distash server` does.
	srv, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: config.Default(), HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cluster := srv.ClusterString()
	base := "http://" + srv.HTTPAddr()

	// The workload: read-through caching over the data pool, through the
	// public client, until stopped.
	db, err := distash.Open(ctx, cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const records = 300
	dataKey := func(i int) []byte { return fmt.Appendf(nil, "d/item:%04d", i) }
	cacheKey := func(i int) []byte { return fmt.Appendf(nil, "c/item:%04d", i) }
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		for i := range records {
			tr.Set(dataKey(i), fmt.Appendf(nil, "record %d", i))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wctx, stopWorkload := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var txs atomic.Int64
	var workErr atomic.Value
	for c := range 3 {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for wctx.Err() == nil {
				i := rng.IntN(records)
				write := rng.IntN(5) == 0
				err := db.Transact(wctx, func(tr *distash.Tx) error {
					if write { // write-around: update the data, drop the cached copy
						tr.Set(dataKey(i), fmt.Appendf(nil, "record %d at %d", i, rng.Int()))
						tr.Clear(cacheKey(i))
						return nil
					}
					v, err := tr.Get(cacheKey(i))
					if err != nil || v != nil {
						return err
					}
					if v, err = tr.Get(dataKey(i)); err != nil {
						return err
					}
					tr.Set(cacheKey(i), v)
					return nil
				})
				if err != nil && wctx.Err() == nil {
					workErr.Store(err)
					return
				}
				txs.Add(1)
			}
		}(uint64(c))
	}
	defer func() { stopWorkload(); wg.Wait() }()

	// The browser.
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 1000))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx); err != nil { // start the browser before listening
		t.Fatalf("start %s: %v", chromium, err)
	}
	var mu sync.Mutex
	var bad []string
	go func() {
		for m, err := range chromedp.Console(bctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()
	checkConsole := func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("the page wrote errors to its console:\n%s", strings.Join(bad, "\n"))
		}
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	read := func() pageState {
		t.Helper()
		st, err := chromedp.Run(bctx, chromedp.Evaluate[pageState](readPage))
		if err != nil {
			t.Fatalf("read the page: %v", err)
		}
		return st
	}
	// waitFor polls the page until ok or the time is up.
	waitFor := func(what string, limit time.Duration, ok func(pageState) bool) pageState {
		t.Helper()
		var st pageState
		if _, err := clustertest.Until(bctx, limit, 200*time.Millisecond, what, func() (bool, string) {
			if st = read(); ok(st) {
				return true, ""
			}
			if err, _ := workErr.Load().(error); err != nil {
				t.Fatalf("workload: %v", err)
			}
			return false, fmt.Sprintf("the page: %+v", st)
		}); err != nil {
			t.Fatal(err)
		}
		return st
	}

	// The charts move while the workload runs: points accumulate, commits
	// per second above zero, a hit rate for the cache pool.
	first := waitFor("the first status", 10*time.Second, func(s pageState) bool { return s.Polls >= 1 })
	st := waitFor("charts with points and transactions/s > 0", 15*time.Second, func(s pageState) bool {
		return s.TpsPoints >= first.TpsPoints+3 && s.TpsMax > 0 && s.HitRatePoints >= 2
	})
	if st.ConflictsPoints < 3 || len(st.HitRatePools) != 1 || st.HitRatePools[0] != "cache" {
		t.Errorf("conflict points %d, hit rate series %v: want points, and one series for the cache pool", st.ConflictsPoints, st.HitRatePools)
	}
	if st.P99Now == "" {
		t.Errorf("the commit p99 chart shows nothing, not even n/a")
	}
	t.Logf("under load (%d transactions so far): %d points on the tx/s chart, peak %.0f tx/s, commit p99 now %s", txs.Load(), st.TpsPoints, st.TpsMax, st.P99Now)
	if shot != "" {
		screenshot(t, bctx, shot, shotAfter)
	}
	checkConsole()

	// Every pool and stash, with status json's figures: stop the workload,
	// then compare until two status documents read around the page agree
	// (flushes may still change a figure for a moment).
	stopWorkload()
	wg.Wait()
	if err, _ := workErr.Load().(error); err != nil {
		t.Fatalf("workload: %v", err)
	}
	var page pageState
	if _, err := clustertest.Until(bctx, 15*time.Second, 300*time.Millisecond, "the page shows status json's figures", func() (bool, string) {
		before := fetchStatus(t, base)
		polls := read().Polls
		page = waitFor("two more polls", 10*time.Second, func(s pageState) bool { return s.Polls >= polls+2 })
		after := fetchStatus(t, base)
		diff := compare(before, page)
		return diff == "" && compare(after, page) == "", diff
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(page.StateText, "updated") || page.Errors > 0 {
		t.Errorf("the page says %q after %d failed polls (last: %q); want it updated with none failed", page.StateText, page.Errors, page.LastError)
	}
	checkConsole()
}

// compare returns how the page differs from the status document, "" if
// it shows every pool and stash with the same figures.
func compare(doc statusDoc, page pageState) string {
	var diffs []string
	pools := map[string]map[string]string{}
	for _, p := range page.Pools {
		pools[p["pool"]] = p
	}
	if len(page.Pools) != len(doc.Pools) {
		diffs = append(diffs, fmt.Sprintf("%d pool rows, status json has %d pools", len(page.Pools), len(doc.Pools)))
	}
	keys := map[string]int64{}
	for _, s := range doc.Stashes {
		keys[s.Pool] += s.Keys
	}
	for _, p := range doc.Pools {
		row := pools[p.Name]
		switch {
		case row == nil:
			diffs = append(diffs, "no row for pool "+p.Name)
		case row["prefix"] != p.Prefix || row["mode"] != p.Mode || row["keys"] != fmt.Sprint(keys[p.Name]):
			diffs = append(diffs, fmt.Sprintf("pool %s: page %v, status json prefix %q mode %s keys %d", p.Name, row, p.Prefix, p.Mode, keys[p.Name]))
		}
	}
	stashes := map[string]map[string]string{}
	for _, s := range page.Stashes {
		stashes[s["stash"]] = s
	}
	if len(page.Stashes) != len(doc.Stashes) {
		diffs = append(diffs, fmt.Sprintf("%d stash rows, status json has %d stashes", len(page.Stashes), len(doc.Stashes)))
	}
	for _, s := range doc.Stashes {
		row := stashes[fmt.Sprint(s.ID)]
		if row == nil {
			diffs = append(diffs, fmt.Sprintf("no row for stash %d", s.ID))
			continue
		}
		for field, want := range map[string]int64{"keys": s.Keys, "bytes": s.Bytes, "reads": s.Reads, "hits": s.Hits, "misses": s.Misses, "evictions": s.Evictions} {
			if row[field] != fmt.Sprint(want) {
				diffs = append(diffs, fmt.Sprintf("stash %d %s: page %s, status json %d", s.ID, field, row[field], want))
			}
		}
	}
	return strings.Join(diffs, "; ")
}

func fetchStatus(t *testing.T, base string) statusDoc {
	t.Helper()
	resp, err := http.Get(base + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc statusDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != 200 || doc.Schema != 1 {
		t.Fatalf("/status.json: %s, %v, schema %d", resp.Status, err, doc.Schema)
	}
	if len(doc.Pools) == 0 || len(doc.Stashes) == 0 {
		t.Fatalf("/status.json has no pools or no stashes: %+v", doc)
	}
	return doc
}

// screenshotOptions returns where to save a screenshot ("" for none)
// and after how long a load.
func screenshotOptions(t *testing.T) (string, time.Duration) {
	path := os.Getenv(envScreenshot)
	if path == "" {
		return "", 0
	}
	wait := 5 * time.Second
	if s := os.Getenv(envScreenshotAfter); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", envScreenshotAfter, err)
		}
		wait = d
	}
	return path, wait
}

// screenshot saves a PNG of the whole page at path after wait.
func screenshot(t *testing.T, ctx context.Context, path string, wait time.Duration) {
	t.Helper()
	time.Sleep(wait)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err == nil {
		err = os.WriteFile(path, png, 0o644)
	}
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	t.Logf("saved a screenshot of the console to %s", path)
}
