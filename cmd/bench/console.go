package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"hearth/internal/chromium"
	"hearth/internal/refdata"
)

// The console run: the dispatch board of a week with consoleStaff staff
// members and consoleSchedules schedules, beside the empty board of a
// merchant with none, on one Hearth in mode all, loaded consoleLoads times
// each by headless Chromium (the tests' browser, internal/chromium). Page
// weight is what the browser transferred (Navigation and Resource Timing:
// the gzipped HTML, and on the first load the stylesheet, the script and
// htmx); time to first render is the first contentful paint (Paint
// Timing), from the start of the navigation, median and p90 of the loads
// after the first.
var (
	consoleStaff     = 50
	consoleSchedules = 500
	consoleLoads     = 21
)

type boardLoad struct {
	FCP       float64 `json:"fcp"`       // ms, first contentful paint
	TTFB      float64 `json:"ttfb"`      // ms, first byte of the HTML
	Loaded    float64 `json:"loaded"`    // ms, load event end
	HTML      float64 `json:"html"`      // bytes transferred for the HTML (headers too)
	Decoded   float64 `json:"decoded"`   // bytes of the HTML after gzip
	Resources float64 `json:"resources"` // bytes transferred for the other resources
}

// boardTiming reads the navigation's timing once the first contentful
// paint is known.
const boardTiming = `new Promise(resolve => {
	const read = () => {
		const n = performance.getEntriesByType("navigation")[0];
		const fcp = performance.getEntriesByName("first-contentful-paint")[0];
		if (!n || !fcp || !n.loadEventEnd) { setTimeout(read, 5); return; }
		const res = performance.getEntriesByType("resource").reduce((s, r) => s + r.transferSize, 0);
		resolve({fcp: fcp.startTime, ttfb: n.responseStart, loaded: n.loadEventEnd,
			html: n.transferSize, decoded: n.decodedBodySize, resources: res});
	};
	read();
})`

func (b *bench) console(ctx context.Context) ([]row, error) {
	if chromium.Path() == "" {
		return nil, chromium.ErrNotFound
	}
	es, url, ref, keys, err := b.merchants(ctx, "console", "console-busy", "console-empty")
	if err != nil {
		return nil, err
	}
	defer es.Close()
	busy, empty := keys[0], keys[1]
	hearth, base, err := b.startHearth(ctx, "console, mode all", url, "all")
	if err != nil {
		return nil, err
	}
	defer b.stopHearth(hearth)
	week, err := seedBoard(ctx, base, busy.Secret, busy.MerchantID, ref)
	if err != nil {
		return nil, err
	}
	b.progress("console: %d staff, %d schedules in the week of %s; %d loads of each board", consoleStaff, consoleSchedules, week, consoleLoads)
	full, err := loadBoard(ctx, base, busy.Secret, week)
	if err != nil {
		return nil, fmt.Errorf("busy board: %w", err)
	}
	none, err := loadBoard(ctx, base, empty.Secret, week)
	if err != nil {
		return nil, fmt.Errorf("empty board: %w", err)
	}
	name := fmt.Sprintf("console: dispatch board, %d staff and %d schedules in the week", consoleStaff, consoleSchedules)
	return []row{
		{name + ": time to first render (first contentful paint, p50 / p90)", full.render(), none.render(),
			fmt.Sprintf("plain: the empty board (no staff, no schedule), same run. Server time to first byte p50: %s, empty %s",
				msf(median(full.each(func(l boardLoad) float64 { return l.TTFB }))), msf(median(none.each(func(l boardLoad) float64 { return l.TTFB }))))},
		{name + ": page weight (transferred; first load with its assets / a later load)", full.weight(), none.weight(),
			fmt.Sprintf("HTML %s before gzip (empty: %s); assets are cached for a year by their content's hash",
				kb(full.loads[len(full.loads)-1].Decoded), kb(none.loads[len(none.loads)-1].Decoded))},
	}, nil
}

// seedBoard creates the staff and, through the API, one order and its
// assignment per schedule, spread over next week so that no staff member
// is booked twice at once; it returns the week's Monday once the read
// models show every schedule.
func seedBoard(ctx context.Context, base, key, merchantID string, ref *refdata.Store) (string, error) {
	staff := make([]string, consoleStaff)
	for i := range staff {
		id, err := ref.CreateStaff(ctx, merchantID, fmt.Sprintf("Staff member %02d", i+1))
		if err != nil {
			return "", err
		}
		staff[i] = id
	}
	now := time.Now().UTC()
	monday := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, 7-(int(now.Weekday())+6)%7)
	call := func(method, path string, body any) (map[string]any, error) {
		raw, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			return nil, err
		}
		if res.StatusCode >= 300 {
			return nil, fmt.Errorf("%s %s: %d %v", method, path, res.StatusCode, out)
		}
		return out, nil
	}
	var customers []string
	for i := range 20 {
		c, err := call(http.MethodPost, "/v1/customers", map[string]any{"name": fmt.Sprintf("Customer %02d", i+1)})
		if err != nil {
			return "", err
		}
		customers = append(customers, c["id"].(string))
	}
	for i := range consoleSchedules {
		o, err := call(http.MethodPost, "/v1/orders", map[string]any{"customer_id": customers[i%len(customers)], "amount_cents": 9000 + i})
		if err != nil {
			return "", err
		}
		k := i / consoleStaff // the staff member's k-th job of the week: two hours, at 08:00, 12:00, 16:00... of its day
		start := monday.AddDate(0, 0, k%7).Add(time.Duration(8+4*(k/7)) * time.Hour)
		if _, err := call(http.MethodPut, "/v1/orders/"+o["id"].(string)+"/assignment", map[string]any{
			"staff_id": staff[i%consoleStaff], "start_at": start.Format(time.RFC3339), "end_at": start.Add(2 * time.Hour).Format(time.RFC3339)}); err != nil {
			return "", err
		}
	}
	from, to := monday.Format(time.RFC3339), monday.AddDate(0, 0, 7).Format(time.RFC3339)
	for deadline := time.Now().Add(time.Minute); ; {
		l, err := call(http.MethodGet, "/v1/schedules?page_size=1&from="+from+"&to="+to, nil)
		if err == nil && int(l["total"].(float64)) == consoleSchedules {
			return monday.Format(time.DateOnly), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the read models never showed %d schedules: %v %v", consoleSchedules, l, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type boardLoads struct{ loads []boardLoad }

// loadBoard signs in with key in a fresh browser and loads the week's
// board consoleLoads times.
func loadBoard(ctx context.Context, base, key, week string) (boardLoads, error) {
	dir, err := os.MkdirTemp("", "hearth-bench-chromium-")
	if err != nil {
		return boardLoads{}, err
	}
	defer os.RemoveAll(dir)
	tab, stop, err := chromium.Start(ctx, chromium.Options{UserDataDir: dir, Width: 1366, Height: 900})
	if err != nil {
		return boardLoads{}, err
	}
	defer stop()
	base = strings.Replace(base, "127.0.0.1", "localhost", 1) // a Secure cookie over http: localhost only
	step, cancel := context.WithTimeout(tab, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(step,
		chromedp.Navigate(base+"/console/signin"),
		chromedp.SendKeys(chromedp.ID("key"), key),
		chromedp.Submit(chromedp.ID("key")),
		chromedp.WaitVisible(chromedp.CSS("#live-board-grid")),
	); err != nil {
		return boardLoads{}, fmt.Errorf("sign in: %w", err)
	}
	// The first load of the board comes with its assets, as a browser's
	// first visit would.
	if _, err := chromedp.Call(step, network.ClearBrowserCache, cdp.Empty{}); err != nil {
		return boardLoads{}, err
	}
	var out boardLoads
	for range consoleLoads {
		if err := chromedp.Do(step, chromedp.Navigate(base+"/console/board?week="+week)); err != nil {
			return boardLoads{}, err
		}
		l, err := chromedp.Run(step, chromedp.Evaluate[boardLoad](boardTiming, chromedp.EvalAwaitPromise))
		if err != nil {
			return boardLoads{}, err
		}
		out.loads = append(out.loads, l)
	}
	return out, nil
}

func (bl boardLoads) each(f func(boardLoad) float64) []float64 {
	out := make([]float64, 0, len(bl.loads))
	for _, l := range bl.loads[1:] { // the first load fills the cache
		out = append(out, f(l))
	}
	slices.Sort(out)
	return out
}

func median(v []float64) float64 { return v[len(v)/2] }

func p90(v []float64) float64 { return v[(len(v)*9)/10] }

func msf(v float64) string { return fmt.Sprintf("%.0f ms", v) }

func kb(v float64) string { return fmt.Sprintf("%.1f KB", v/1024) }

func (bl boardLoads) render() string {
	fcp := bl.each(func(l boardLoad) float64 { return l.FCP })
	return msf(median(fcp)) + " / " + msf(p90(fcp))
}

func (bl boardLoads) weight() string {
	first, later := bl.loads[0], bl.loads[len(bl.loads)-1]
	return kb(first.HTML+first.Resources) + " / " + kb(later.HTML+later.Resources)
}
