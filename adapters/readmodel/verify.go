package readmodel

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"hearth/app/ops"
	"hearth/domain/event"
	"hearth/internal/aggregates"
)

// VerifyConfig is what Verify needs.
type VerifyConfig struct {
	// Log reads the event store (pubsub.EventLog). Required.
	Log EventLog
	// Decoders open the events' sealed fields (the vault). Default:
	// aggregates.Plain, which leaves them sealed.
	Decoders aggregates.Decoders
	// DB is the read-model database. Required.
	DB *bun.DB
	// Verification says which projections, and how (Projections defaults
	// to all of them).
	ops.Verification
	// BatchSize is how many streams are compared per read-model query.
	// Defaults to 500.
	BatchSize int
}

// Verify rebuilds every read-model row in memory from the event store (the
// same fold the projections use) and compares it, field by field, with the
// table, and each aggregate's change log with its events: exactly one row
// per event, versions contiguous, the event's id and type as action, and
// the last row's after snapshot equal to the fold. Rows or change-log
// entries without events are differences too. It works in both database
// layouts: the event store and the read model are read separately.
func Verify(ctx context.Context, cfg VerifyConfig) (ops.VerifyReport, error) {
	if cfg.Log == nil || cfg.DB == nil {
		return ops.VerifyReport{}, errors.New("readmodel.Verify: Log and DB are required")
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 500)
	ts, err := selectTargets(cfg.Projections)
	if err != nil {
		return ops.VerifyReport{}, err
	}
	v := &verifier{cfg: cfg}
	for _, t := range ts {
		v.report = ops.ProjectionReport{Projection: t.projectionName(), Differences: []ops.Difference{}}
		if err := t.verify(ctx, v); err != nil {
			return ops.VerifyReport{}, fmt.Errorf("verify %s: %w", t.projectionName(), err)
		}
		v.out.Projections = append(v.out.Projections, v.report)
	}
	return v.out, nil
}

type verifier struct {
	cfg    VerifyConfig
	out    ops.VerifyReport
	report ops.ProjectionReport
}

func (t *table[V, PV, R]) verify(ctx context.Context, v *verifier) error {
	total, err := v.cfg.Log.Count(ctx, t.agg.Type)
	if err != nil {
		return err
	}
	progress := newProgressLine(v.cfg.Progress, "verify "+t.agg.Projection, total)
	seen := map[string]bool{}
	differing := map[string]bool{}
	var diffs []ops.Difference
	streams := map[string][]event.Recorded{}
	flush := func() error {
		if len(streams) == 0 {
			return nil
		}
		ds, err := t.compare(ctx, v.cfg.DB, streams)
		if err != nil {
			return err
		}
		for _, d := range ds {
			differing[d.AggregateID] = true
		}
		diffs = append(diffs, ds...)
		streams = map[string][]event.Recorded{}
		return nil
	}
	err = v.cfg.Log.Scan(ctx, t.agg.Projection, t.agg.Type, tolerant(aggregates.Or(v.cfg.Decoders).Decoder(t.agg)), func(stream []event.Recorded) error {
		id := stream[0].StreamID
		seen[id] = true
		one := map[string][]event.Recorded{id: stream}
		if err := readErased(ctx, v.cfg.Log, v.cfg.Decoders, t.agg, tolerant, one); err != nil {
			return err
		}
		stream = one[id]
		streams[id] = stream
		v.report.Streams++
		v.report.Events += int64(len(stream))
		progress.update(v.report.Events)
		if len(streams) >= v.cfg.BatchSize {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	progress.done(v.report.Events)
	if err != nil {
		return err
	}
	// Rows and change-log entries of aggregates without events.
	orphans, err := t.orphans(ctx, v.cfg.DB, seen)
	if err != nil {
		return err
	}
	for _, id := range orphans {
		if !differing[id] {
			ds, err := t.compare(ctx, v.cfg.DB, map[string][]event.Recorded{id: nil})
			if err != nil {
				return err
			}
			differing[id] = true
			diffs = append(diffs, ds...)
		}
	}
	if len(differing) > 0 && v.cfg.RecheckAfter > 0 {
		if diffs, err = t.recheck(ctx, v, differing); err != nil {
			return err
		}
	}
	v.report.Differences = append(v.report.Differences, diffs...)
	return nil
}

// undecodable is an event verification could not decode (its data key
// missing, its box tampered with, a type this version does not know): the
// fold of its aggregate fails on it, a difference of that aggregate, and
// verification goes on with the others.
type undecodable struct {
	eventType string
	err       error
}

func (u undecodable) EventType() string { return u.eventType }

// tolerant is dec, with an event it cannot decode read as undecodable.
func tolerant(dec event.Decoder) event.Decoder {
	return func(eventType string, data []byte, more ...[]byte) (event.Event, error) {
		e, err := dec(eventType, data, more...)
		if err != nil {
			return undecodable{eventType: eventType, err: err}, nil
		}
		return e, nil
	}
}

// recheck reads the differing aggregates afresh, once, after a pause, and
// returns what still differs.
func (t *table[V, PV, R]) recheck(ctx context.Context, v *verifier, differing map[string]bool) ([]ops.Difference, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(v.cfg.RecheckAfter):
	}
	var out []ops.Difference
	for batch := range slices.Chunk(slices.Collect(maps.Keys(differing)), v.cfg.BatchSize) {
		streams, err := v.cfg.Log.Streams(ctx, t.agg.Projection, t.agg.Type, tolerant(aggregates.Or(v.cfg.Decoders).Decoder(t.agg)), batch)
		if err != nil {
			return nil, err
		}
		if err := readErased(ctx, v.cfg.Log, v.cfg.Decoders, t.agg, tolerant, streams); err != nil {
			return nil, err
		}
		for _, id := range batch {
			if _, ok := streams[id]; !ok {
				streams[id] = nil
			}
		}
		ds, err := t.compare(ctx, v.cfg.DB, streams)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// orphans returns the ids of rows and change-log aggregates that have no
// stream in seen.
func (t *table[V, PV, R]) orphans(ctx context.Context, db *bun.DB, seen map[string]bool) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT id::text FROM ? UNION SELECT DISTINCT aggregate_id::text FROM change_log WHERE aggregate_type = ?`,
		bun.Ident(t.agg.Table), t.agg.Type)
	if err != nil {
		return nil, fmt.Errorf("list %s ids: %w", t.agg.Table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if !seen[id] {
			out = append(out, id)
		}
	}
	return out, rows.Err()
}

// compare compares the given streams (nil: no events) with their rows and
// change logs.
func (t *table[V, PV, R]) compare(ctx context.Context, db *bun.DB, streams map[string][]event.Recorded) ([]ops.Difference, error) {
	ids := make([]string, 0, len(streams))
	for id := range streams {
		ids = append(ids, id)
	}
	rows, err := t.rows(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	changes, err := t.changes(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	var out []ops.Difference
	for _, id := range ids {
		out = append(out, t.compareOne(id, streams[id], rows, changes[id])...)
	}
	return out, nil
}

func (t *table[V, PV, R]) compareOne(id string, stream []event.Recorded, rows map[string]V, changes []changeRow) []ops.Difference {
	diff := func(what, rm, log string) ops.Difference {
		return ops.Difference{Projection: t.agg.Projection, AggregateID: id, What: what, ReadModel: rm, EventLog: log}
	}
	row, found := rows[id]
	if len(stream) == 0 {
		var out []ops.Difference
		if found {
			out = append(out, diff("row", fmt.Sprintf("a row at version %d", t.version(row)), "no events"))
		}
		if len(changes) > 0 {
			out = append(out, diff("change_log", fmt.Sprintf("%d rows", len(changes)), "no events"))
		}
		return out
	}
	want, err := t.fold(stream, 0)
	if err != nil {
		return []ops.Difference{diff("fold", "-", err.Error())}
	}
	var out []ops.Difference
	if !found {
		out = append(out, diff("row", "missing", fmt.Sprintf("version %d", t.version(want))))
	} else {
		out = append(out, fieldDiffs(row, want, ops.PersonalViewFields(t.agg.Type), diff)...)
	}
	if len(changes) != len(stream) {
		out = append(out, diff("change_log", fmt.Sprintf("%d rows", len(changes)), fmt.Sprintf("%d events", len(stream))))
	}
	reported := 0
	for i, r := range stream {
		if i >= len(changes) || reported == 3 {
			break
		}
		// Whose it is (the merchant: the histories and exports select by
		// it), which event, who and when, as the event says.
		c := changes[i]
		if c.Version != r.Version || c.EventID != r.ID || c.Action != r.Type || c.MerchantID != r.MerchantID ||
			c.Actor != r.Actor || !c.OccurredAt.Equal(r.OccurredAt) {
			const row = "version %d event %s action %s merchant %s actor %s at %s"
			out = append(out, diff(fmt.Sprintf("change_log v%d", r.Version),
				fmt.Sprintf(row, c.Version, c.EventID, c.Action, c.MerchantID, c.Actor, c.OccurredAt.UTC().Format(time.RFC3339Nano)),
				fmt.Sprintf(row, r.Version, r.ID, r.Type, r.MerchantID, r.Actor, r.OccurredAt.UTC().Format(time.RFC3339Nano))))
			reported++
		}
	}
	if len(changes) == len(stream) {
		after, err := json.Marshal(PV(&want))
		if err == nil && !sameJSON(changes[len(changes)-1].After, after) {
			personal := ops.PersonalViewFields(t.agg.Type)
			out = append(out, diff("change_log after", redactJSON(changes[len(changes)-1].After, personal), redactJSON(after, personal)))
		}
	}
	return out
}

// fieldDiffs compares two views field by field (times by instant). The
// fields named personal are shown redacted: the report lands on an
// operator's terminal, in tickets and in logs, where a customer's text
// has no business and an erasure cannot reach it.
func fieldDiffs[V any](got, want V, personal []string, diff func(what, rm, log string) ops.Difference) []ops.Difference {
	var out []ops.Difference
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		f := g.Type().Field(i)
		a, b := g.Field(i).Interface(), w.Field(i).Interface()
		if sameValue(a, b) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			name = f.Name
		}
		if slices.Contains(personal, name) {
			out = append(out, diff(name, redacted(a), redacted(b)))
			continue
		}
		out = append(out, diff(name, show(a), show(b)))
	}
	return out
}

// redacted shows a personal value by what tells two apart without saying
// what they hold: empty or null as such, otherwise its length and the
// start of its SHA-256.
func redacted(v any) string {
	var s string
	switch x := v.(type) {
	case *string:
		if x == nil {
			return "null"
		}
		s = *x
	case string:
		s = x
	default:
		return fmt.Sprintf("(personal, %T)", v)
	}
	if s == "" {
		return `""`
	}
	sum := sha256.Sum256([]byte(s))
	return fmt.Sprintf("(personal: %d characters, sha256 %x)", utf8.RuneCountInString(s), sum[:4])
}

// redactJSON is a change-log snapshot with its personal fields redacted.
func redactJSON(snapshot []byte, personal []string) string {
	var m map[string]any
	if err := json.Unmarshal(snapshot, &m); err != nil {
		return fmt.Sprintf("(a snapshot of %d bytes that is no JSON object: %v)", len(snapshot), err)
	}
	for _, f := range personal {
		if v, ok := m[f]; ok {
			if s, ok := v.(string); ok {
				m[f] = redacted(s)
			} else if v != nil {
				m[f] = redacted(fmt.Sprint(v))
			}
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return fmt.Sprintf("(a snapshot of %d bytes: %v)", len(snapshot), err)
	}
	return string(out)
}

func sameValue(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		return x.Equal(b.(time.Time))
	case *time.Time:
		y := b.(*time.Time)
		return (x == nil) == (y == nil) && (x == nil || x.Equal(*y))
	}
	return reflect.DeepEqual(a, b)
}

func show(v any) string {
	switch x := v.(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case *time.Time:
		if x == nil {
			return "null"
		}
		return x.UTC().Format(time.RFC3339Nano)
	case *string:
		if x == nil {
			return "null"
		}
		return fmt.Sprintf("%q", *x)
	case string:
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprint(v)
}

// progressLine writes "label: n/total events (p%)" in place, at most five
// times a second.
type progressLine struct {
	w      io.Writer
	label  string
	total  int64
	start  time.Time
	last   time.Time
	suffix func(n int64, elapsed time.Duration) string
}

func newProgressLine(w io.Writer, label string, total int64) *progressLine {
	return &progressLine{w: w, label: label, total: total, start: time.Now()}
}

func (p *progressLine) update(n int64) {
	if p.w == nil || time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.print(n, "")
}

func (p *progressLine) print(n int64, end string) {
	pct := int64(100)
	if p.total > 0 {
		pct = min(100, n*100/p.total)
	}
	line := fmt.Sprintf("\r%s: %d/%d events (%d%%)", p.label, n, p.total, pct)
	if p.suffix != nil {
		line += p.suffix(n, time.Since(p.start))
	}
	fmt.Fprint(p.w, line+"\033[K"+end)
}

func (p *progressLine) done(n int64) {
	if p.w != nil {
		p.print(n, "\n")
	}
}
