package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"hearth/app/ops"
	"hearth/domain/apperr"
)

// LagSample is one projection's lag at one moment: the messages of its
// topic not acknowledged yet, and the age of the oldest.
type LagSample struct {
	Projection string
	Events     int64
	Seconds    float64
}

type lagPoint struct {
	At      time.Time
	Events  int64
	Seconds float64
}

// LagHistory keeps the projections' lag over the last minutes in memory,
// for the on-call view's charts: Run samples it every interval (the same
// figures as the hearth_projection_lag_* metrics).
type LagHistory struct {
	sample func(ctx context.Context) ([]LagSample, error)
	every  time.Duration
	span   time.Duration

	mu      sync.Mutex
	points  map[string][]lagPoint
	lastErr error
}

// NewLagHistory keeps span's worth of samples, one every interval.
func NewLagHistory(sample func(ctx context.Context) ([]LagSample, error), every, span time.Duration) (*LagHistory, error) {
	if sample == nil || every <= 0 || span < every {
		return nil, errors.New("console.NewLagHistory: a sampler, an interval and a span of at least one interval are required")
	}
	return &LagHistory{sample: sample, every: every, span: span, points: map[string][]lagPoint{}}, nil
}

// Run samples until ctx ends.
func (h *LagHistory) Run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		h.Sample(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample takes one sample at now.
func (h *LagHistory) Sample(ctx context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, min(h.every, 3*time.Second))
	defer cancel()
	samples, err := h.sample(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	if err != nil {
		return
	}
	for _, s := range samples {
		pts := append(h.points[s.Projection], lagPoint{At: now, Events: s.Events, Seconds: s.Seconds})
		i := 0
		for i < len(pts) && now.Sub(pts[i].At) > h.span {
			i++
		}
		h.points[s.Projection] = pts[i:]
	}
}

func (h *LagHistory) snapshot() (map[string][]lagPoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]lagPoint, len(h.points))
	for k, v := range h.points {
		out[k] = slices.Clone(v)
	}
	return out, h.lastErr
}

// minutes shows a span such as 10m0s as "10 min".
func minutes(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%d min", int(d.Minutes()))
	}
	return d.String()
}

// lagView is one projection's lag, now and charted.
type lagView struct {
	Projection string
	Now        lagPoint
	Max        int64
	Chart      template.HTML
}

// Chart size, in SVG units (the stylesheet scales it to the column).
const chartW, chartH = 240, 48

// lagChart draws the lag in events over the span as an inline SVG line,
// the newest sample at the right edge.
func lagChart(projection string, pts []lagPoint, now time.Time, span time.Duration) (template.HTML, int64) {
	var peak int64
	for _, p := range pts {
		peak = max(peak, p.Events)
	}
	top := max(peak, 1)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s: lag over the last %s, at most %d events">`,
		chartW, chartH, template.HTMLEscapeString(projection), minutes(span), peak)
	fmt.Fprintf(&b, `<title>%s lag (events), last %s</title>`, template.HTMLEscapeString(projection), minutes(span))
	fmt.Fprintf(&b, `<line x1="0" y1="%d" x2="%d" y2="%d" class="axis"/>`, chartH-1, chartW, chartH-1)
	if len(pts) > 0 {
		b.WriteString(`<polyline class="line" points="`)
		for i, p := range pts {
			x := float64(chartW) * (1 - float64(now.Sub(p.At))/float64(span))
			y := float64(chartH-2) - float64(chartH-4)*float64(p.Events)/float64(top)
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", max(x, 0), y)
		}
		b.WriteString(`"/>`)
	}
	fmt.Fprintf(&b, `<text x="2" y="9" class="label">%d</text><text x="2" y="%d" class="label">−%s</text><text x="%d" y="%d" class="label" text-anchor="end">now</text>`,
		top, chartH-3, minutes(span), chartW-2, chartH-3)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()), peak
}

// kv is one entry of a report of unknown shape (leadership), shown as
// nested definition lists.
type kv struct {
	Key, Value string
	Sub        []kv
}

func kvs(m map[string]any) []kv {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]kv, 0, len(keys))
	for _, k := range keys {
		e := kv{Key: label(k)}
		switch v := m[k].(type) {
		case map[string]any:
			e.Sub = kvs(v)
		case []any:
			for i, x := range v {
				if sub, ok := x.(map[string]any); ok {
					e.Sub = append(e.Sub, kv{Key: fmt.Sprint(i + 1), Sub: kvs(sub)})
				} else {
					e.Sub = append(e.Sub, kv{Key: fmt.Sprint(i + 1), Value: fmt.Sprint(x)})
				}
			}
		default:
			e.Value = fmt.Sprint(v)
		}
		out = append(out, e)
	}
	return out
}

// verifyRecheck is how long a verification waits before reading the
// aggregates that differ once more, so that events in flight through a
// live projection are not reported (app verify's default).
const verifyRecheck = 2 * time.Second

// verifyReport verifies one projection, or all of them ("").
func (c *Console) verifyReport(ctx context.Context, projection string) ([]VerifyResult, error) {
	v := ops.Verification{RecheckAfter: verifyRecheck}
	if projection != "" {
		v.Projections = []string{projection}
	}
	report, err := c.cfg.Verifier.Verify(ctx, v)
	out := make([]VerifyResult, len(report.Projections))
	for i, p := range report.Projections {
		out[i] = VerifyResult{Projection: p.Projection, Streams: p.Streams, Events: p.Events}
		for _, d := range p.Differences {
			out[i].Differences = append(out[i].Differences, differenceLine(d))
		}
	}
	return out, err
}

// differenceLine is a difference as the on-call page shows it to an admin
// key, which has no CRM data (docs/api.md): the values of an aggregate's
// fields and of its change log's snapshots are the merchant's, so only
// what differs is named. Versions, counts, the change log's envelope (ids,
// action, actor, time) and a fold's error are shown as they are; `app
// verify`, run with the databases' credentials, prints every value.
func differenceLine(d ops.Difference) string {
	switch {
	case d.What == "row", d.What == "change_log", d.What == "version", d.What == "fold", strings.HasPrefix(d.What, "change_log v"):
		return d.String()
	}
	return fmt.Sprintf("%s %s %s: read model and event log differ (values withheld: CRM data)", d.Projection, d.AggregateID, d.What)
}

// VerifyResult is what verifying one projection found.
type VerifyResult struct {
	Projection     string
	Streams        int64
	Events         int64
	Differences    []string
	DifferencesAll int
}

type verifyRun struct {
	Started, Finished time.Time
	Projection        string
	Results           []VerifyResult
	Error             string
}

// verifyShown caps the differences a projection shows; the CLI prints
// them all.
const verifyShown = 20

func (v *verifier) start(verify func(ctx context.Context, projection string) ([]VerifyResult, error), projection string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.running {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	v.running, v.cancel, v.done = true, cancel, make(chan struct{})
	run := &verifyRun{Started: now, Projection: projection}
	v.last = run
	done := v.done
	go func() {
		defer close(done)
		defer cancel()
		res, err := verify(ctx, projection)
		v.mu.Lock()
		defer v.mu.Unlock()
		run.Finished = time.Now()
		if err != nil {
			run.Error = err.Error()
		}
		for _, r := range res {
			r.DifferencesAll = len(r.Differences)
			r.Differences = r.Differences[:min(len(r.Differences), verifyShown)]
			run.Results = append(run.Results, r)
		}
		v.running = false
	}()
	return true
}

// state is the last verification (nil for none) and whether it runs.
func (v *verifier) state() (verifyRun, bool, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last == nil {
		return verifyRun{}, false, false
	}
	return *v.last, true, v.running
}

// stop cancels a running verification and waits for it.
func (v *verifier) stop() {
	v.mu.Lock()
	cancel, done := v.cancel, v.done
	v.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

type rebuildView struct {
	Projection string
	Progress   *ops.RebuildProgress
	Running    bool
	Percent    int64
}

// leaderView is who leads one unit (a projection's lock), as the
// leadership report says.
type leaderView struct {
	Unit, Holder, Term, Since string
	// Role is this instance's: leader or standby.
	Role, ThisSince string
}

// leadersOf reads from a leadership report (GET /admin/leadership) who
// leads each unit: the term the database records (current), and this
// instance's role.
func leadersOf(m map[string]any, stamp func(string) string) []leaderView {
	units, _ := m["units"].([]any)
	str := func(v any) string {
		if v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	var out []leaderView
	for _, x := range units {
		u, ok := x.(map[string]any)
		if !ok {
			continue
		}
		v := leaderView{Unit: str(u["name"]), Role: str(u["role"]), ThisSince: stamp(str(u["since"]))}
		if cur, ok := u["current"].(map[string]any); ok {
			v.Holder, v.Term, v.Since = str(cur["holder"]), str(cur["term"]), stamp(str(cur["since"]))
		}
		out = append(out, v)
	}
	return out
}

type oncallData struct {
	Leaders       []leaderView
	Leadership    []kv
	LeadershipErr string
	Lags          []lagView
	LagErr        string
	LagSpan       string
	Parked        []ops.ParkedAggregate
	ParkedErr     string
	Rebuilds      []rebuildView
	Projections   []string
	Verify        *verifyRun
	Verifying     bool
	Has           map[string]bool
}

// oncallPage reads what the engineer on call watches. A part that fails
// says so in its place; the others still show.
func (c *Console) oncallPage(r *http.Request, s *session) (*page, error) {
	ctx := r.Context()
	d := &oncallData{Projections: c.cfg.Projections, Has: map[string]bool{
		"leadership": c.cfg.Leadership != nil, "lags": c.cfg.Lags != nil, "parked": c.cfg.Parked != nil,
		"rebuilds": c.cfg.Rebuilds != nil, "verify": c.cfg.Verifier != nil,
	}}
	if c.cfg.Leadership != nil {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := c.cfg.Leadership(lctx)
		cancel()
		if err != nil {
			d.LeadershipErr = err.Error()
		}
		d.Leadership = kvs(m)
		d.Leaders = leadersOf(m, func(v string) string {
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return t.In(s.loc).Format("2006-01-02 15:04:05 MST")
			}
			return v
		})
	}
	if h := c.cfg.Lags; h != nil {
		d.LagSpan = minutes(h.span)
		series, err := h.snapshot()
		if err != nil {
			d.LagErr = err.Error()
		}
		now := time.Now()
		for _, name := range slices.Sorted(maps.Keys(series)) {
			pts := series[name]
			v := lagView{Projection: name}
			if len(pts) > 0 {
				v.Now = pts[len(pts)-1]
			}
			v.Chart, v.Max = lagChart(name, pts, now, h.span)
			d.Lags = append(d.Lags, v)
		}
	}
	if c.cfg.Parked != nil {
		list, err := c.cfg.Parked.ListParked(ctx, "")
		if err != nil {
			d.ParkedErr = err.Error()
		}
		d.Parked = list
	}
	if c.cfg.Rebuilds != nil {
		for _, name := range c.cfg.Projections {
			v := rebuildView{Projection: name}
			if p, err := c.cfg.Rebuilds.RebuildStatus(name); err == nil {
				v.Progress = &p
				v.Running = p.FinishedAt.IsZero() && p.Phase != "done" && p.Phase != "failed" && p.Phase != "cancelled"
				v.Percent = 100
				if p.Total > 0 {
					v.Percent = min(100, p.Events*100/p.Total)
				}
			}
			d.Rebuilds = append(d.Rebuilds, v)
		}
	}
	if run, ok, running := c.verify.state(); ok {
		d.Verify, d.Verifying = &run, running
	}
	return &page{Title: "On call", Nav: "oncall", Data: d, name: "oncall"}, nil
}

// projection reads the {projection} path value, which must name one.
func (c *Console) projection(r *http.Request) (string, error) {
	p := r.PathValue("projection")
	if !slices.Contains(c.cfg.Projections, p) {
		return "", apperr.ErrNotFound
	}
	return p, nil
}

type parkedData struct {
	Aggregate ops.ParkedAggregate
	FirstID   string
}

func (c *Console) parkedPage(r *http.Request, s *session) (*page, error) {
	proj, id, err := c.parkedTarget(r)
	if err != nil {
		return nil, err
	}
	a, err := c.cfg.Parked.GetParked(r.Context(), proj, id)
	if err != nil {
		return nil, err
	}
	d := &parkedData{Aggregate: a, FirstID: a.FirstEventID}
	return &page{Title: "Parked " + a.StreamType + " " + short(a.StreamID), Nav: "oncall", Data: d, name: "parked"}, nil
}

func (c *Console) parkedDetail(w http.ResponseWriter, r *http.Request, s *session) error {
	err := c.show(c.parkedPage)(w, r, s)
	if errors.Is(err, apperr.ErrNotFound) && c.cfg.Parked != nil {
		// Replayed or skipped meanwhile: nothing is parked here any more.
		return seeOther(w, r, s, "/console/oncall", flash{Kind: "ok", Text: "That aggregate is not parked (any more)."})
	}
	return err
}

// parkedTarget reads the projection and aggregate of a parked route.
func (c *Console) parkedTarget(r *http.Request) (projection, id string, err error) {
	if c.cfg.Parked == nil {
		return "", "", apperr.ErrNotFound
	}
	if projection, err = c.projection(r); err != nil {
		return "", "", err
	}
	id, err = pathID(r)
	return projection, id, err
}

// replay applies a parked aggregate's waiting events again (POST
// /admin/parked/{projection}/{id}/replay); it records itself in the audit
// log as done by the session's key.
func (c *Console) replay(w http.ResponseWriter, r *http.Request, s *session) error {
	proj, id, err := c.parkedTarget(r)
	if err != nil {
		return err
	}
	res, err := c.cfg.Parked.Replay(r.Context(), proj, id, s.principal.Subject())
	if err != nil {
		return c.refuse(w, r, s, err, "replay", c.parkedPage)
	}
	if res.Unparked {
		return seeOther(w, r, s, "/console/oncall", flash{Kind: "ok",
			Text: fmt.Sprintf("Replayed %s %s: applied %d events; it flows again.", proj, short(id), res.Applied)})
	}
	return seeOther(w, r, s, r.URL.Path[:len(r.URL.Path)-len("/replay")], flash{Kind: "warn",
		Text: fmt.Sprintf("Still parked: applied %d, %d still waiting. %s", res.Applied, res.Waiting, res.Error)})
}

// skip skips the first waiting event with a reason (POST
// /admin/parked/{projection}/{id}/skip).
func (c *Console) skip(w http.ResponseWriter, r *http.Request, s *session) error {
	proj, id, err := c.parkedTarget(r)
	if err != nil {
		return err
	}
	res, err := c.cfg.Parked.Skip(r.Context(), ops.Skip{Projection: proj, StreamID: id,
		EventID: r.PostFormValue("event_id"), By: s.principal.Subject(), Reason: r.PostFormValue("reason")})
	if err != nil {
		return c.refuse(w, r, s, err, "skip", c.parkedPage, "event_id", "reason")
	}
	msg := fmt.Sprintf("Skipped version %d (%s).", res.Version, res.Type)
	if res.Unparked {
		return seeOther(w, r, s, "/console/oncall", flash{Kind: "ok", Text: msg + " Nothing else waits: it flows again."})
	}
	return seeOther(w, r, s, r.URL.Path[:len(r.URL.Path)-len("/skip")], flash{Kind: "ok",
		Text: fmt.Sprintf("%s %d events still wait: replay them next.", msg, res.Waiting)})
}

func (c *Console) startRebuild(w http.ResponseWriter, r *http.Request, s *session) error {
	if c.cfg.Rebuilds == nil {
		return apperr.ErrNotFound
	}
	proj, err := c.projection(r)
	if err != nil {
		return err
	}
	if _, err := c.cfg.Rebuilds.StartRebuild(r.Context(), proj, s.principal.Subject()); err != nil {
		return c.oncallRefused(w, r, s, err, "rebuild-"+proj)
	}
	return seeOther(w, r, s, "/console/oncall#rebuilds", flash{Kind: "ok", Text: "Rebuild of " + proj + " started."})
}

func (c *Console) cancelRebuild(w http.ResponseWriter, r *http.Request, s *session) error {
	if c.cfg.Rebuilds == nil {
		return apperr.ErrNotFound
	}
	proj, err := c.projection(r)
	if err != nil {
		return err
	}
	if _, err := c.cfg.Rebuilds.CancelRebuild(r.Context(), proj, s.principal.Subject()); err != nil {
		return c.oncallRefused(w, r, s, err, "rebuild-"+proj)
	}
	return seeOther(w, r, s, "/console/oncall#rebuilds", flash{Kind: "ok", Text: "Rebuild of " + proj + " cancelled."})
}

func (c *Console) oncallRefused(w http.ResponseWriter, r *http.Request, s *session, err error, formID string) error {
	return c.refuse(w, r, s, err, formID, c.oncallPage)
}

// startVerify starts a verification of one projection, or all, in the
// background; the on-call page shows its results.
func (c *Console) startVerify(w http.ResponseWriter, r *http.Request, s *session) error {
	if c.cfg.Verifier == nil {
		return apperr.ErrNotFound
	}
	proj := r.PostFormValue("projection")
	if proj != "" && !slices.Contains(c.cfg.Projections, proj) {
		return c.oncallRefused(w, r, s, apperr.Invalid("projection", "must be one of %s", strings.Join(c.cfg.Projections, ", ")), "verify")
	}
	if !c.verify.start(c.verifyReport, proj, c.cfg.Now()) {
		return seeOther(w, r, s, "/console/oncall#verify", flash{Kind: "warn", Text: "A verification is already running."})
	}
	return seeOther(w, r, s, "/console/oncall#verify", flash{Kind: "ok", Text: "Verification of " + cmp.Or(proj, "every projection") + " started."})
}
