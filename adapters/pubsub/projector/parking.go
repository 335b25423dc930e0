package projector

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/internal/database"
)

// Parking keeps an aggregate's events in order when one of them cannot be
// applied (guarantee 6: poison without corruption).
//
// When an event exhausts its retry budget, the router's park middleware
// marks its aggregate parked for that projection (parked_aggregates) and
// stores the event (parked_events); the event still goes to the poison
// topic, as an audit copy. From then on the projection's handler stores
// every later event of that aggregate in parked_events instead of applying
// it; other aggregates keep flowing. Replay applies the waiting events in
// version order through the projection's Apply (the version guard and gap
// check still protect the row) and unparks the aggregate when all of them
// applied; when one fails again, the applied ones are dropped from the
// queue and the aggregate stays parked behind the failing one. Skip
// records one event as skipped (who, why) and applies it as a version
// bump (event.Skipped), so the next event follows it.
//
// The tables live in the event-store database (the consumer side). The
// handler's check and a replay serialise on the parked_aggregates row: the
// handler takes it FOR SHARE, replay and skip FOR UPDATE, so an event
// delivered during a replay waits for it and is then applied (unparked) or
// parked behind the others (still parked).
type Parking struct {
	db          *bun.DB
	log         *pubsub.EventLog // the missing events of a gap, for replay
	projections map[string]Projection
	parkedCache anyParkedCache
	// Audit, when set (before use), writes the audit entry of each replay
	// and skip in the replay's or skip's own transaction
	// (refdata.WriteAudit); the entry is the use case's (ops.Operator).
	Audit func(ctx context.Context, tx bun.IDB, e ops.AuditEntry) error
}

// anyParkedCache remembers, per projection, whether it has any parked
// aggregate, so that the handler's per-event check (a round trip on the
// live path) is skipped while none is. Only the router of the leader
// parks, through this Parking, which notes it at once; the answer is read
// again at most every anyParkedTTL, which bounds how long a park by
// another process (an old leader in its last moments) goes unnoticed. Even
// then nothing is applied out of order: the gap check refuses an event
// whose predecessor was not applied.
type anyParkedCache struct {
	mu    sync.Mutex
	state map[string]anyParkedState
}

type anyParkedState struct {
	parked bool
	at     time.Time
	gen    uint64 // bumped by every park, so a read that raced one is not kept
}

const anyParkedTTL = time.Second

// NewParking returns parking on the event-store database for the given
// projections (replay and skip apply through their Apply).
func NewParking(db *bun.DB, projections ...Projection) (*Parking, error) {
	if db == nil {
		return nil, errors.New("projector.NewParking: nil db")
	}
	log, err := pubsub.NewEventLog(db)
	if err != nil {
		return nil, err
	}
	pk := &Parking{db: db, log: log, projections: map[string]Projection{}}
	for _, p := range projections {
		if p.Name == "" || p.Apply == nil || p.Decode == nil {
			return nil, fmt.Errorf("projector.NewParking: projection %q needs Name, Decode and Apply", p.Name)
		}
		pk.projections[p.Name] = p
	}
	return pk, nil
}

// Projections names the projections parking knows, sorted.
func (pk *Parking) Projections() []string {
	names := make([]string, 0, len(pk.projections))
	for n := range pk.projections {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (pk *Parking) projection(name string) (Projection, error) {
	p, ok := pk.projections[name]
	if !ok {
		return Projection{}, apperr.Invalid("projection", "unknown projection %q; one of %s", name, strings.Join(pk.Projections(), ", "))
	}
	return p, nil
}

// hold parks r when its aggregate is parked for projection and reports
// whether it did. One statement: the check takes the parked row FOR SHARE,
// so it waits for a replay or skip in progress. An event before the one
// that parked the aggregate was applied before it parked (delivered again
// after a crash, or a term that ended before its batch was acknowledged):
// it is not held, and its apply changes nothing (version guard), so the
// waiting events are only those not applied, the failed one first.
func (pk *Parking) hold(ctx context.Context, projection string, r event.Recorded) (bool, error) {
	if maybe, err := pk.anyParkedFor(ctx, projection); err != nil || !maybe {
		return false, err
	}
	if s, ok := r.Event.(event.Skipped); ok {
		r.Type = s.Of // waits as the event it is; replay and skip know it was skipped (skippedWaiting)
	}
	env, err := json.Marshal(r.Envelope)
	if err != nil {
		return false, err
	}
	var parked bool
	err = pk.db.DB.QueryRowContext(ctx, `
		WITH p AS (SELECT 1 FROM parked_aggregates WHERE projection = $1 AND stream_id = $2 AND $3 >= first_version FOR SHARE),
		ins AS (INSERT INTO parked_events (projection, stream_id, version, event_id, type, envelope)
		        SELECT $1, $2, $3, $4, $5, $6 FROM p ON CONFLICT DO NOTHING)
		SELECT EXISTS (SELECT 1 FROM p)`,
		projection, r.StreamID, r.Version, r.ID, r.Type, string(env)).Scan(&parked)
	if err != nil {
		return false, fmt.Errorf("check parking of %s: %w", r.StreamID, err)
	}
	return parked, nil
}

// anyParkedFor reports whether projection may have a parked aggregate.
func (pk *Parking) anyParkedFor(ctx context.Context, projection string) (bool, error) {
	c := &pk.parkedCache
	c.mu.Lock()
	st, ok := c.state[projection]
	c.mu.Unlock()
	if ok && time.Since(st.at) < anyParkedTTL {
		return st.parked, nil
	}
	at := time.Now()
	var parked bool
	err := pk.db.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM parked_aggregates WHERE projection = $1)`, projection).Scan(&parked)
	if err != nil {
		return false, fmt.Errorf("check parked aggregates of %s: %w", projection, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == nil {
		c.state = map[string]anyParkedState{}
	}
	if now := c.state[projection]; now.gen == st.gen {
		c.state[projection] = anyParkedState{parked: parked, at: at, gen: st.gen}
	} else {
		parked = true // parked meanwhile
	}
	return parked, nil
}

// parked notes that projection has a parked aggregate now.
func (c *anyParkedCache) parked(projection string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == nil {
		c.state = map[string]anyParkedState{}
	}
	c.state[projection] = anyParkedState{parked: true, at: time.Now(), gen: c.state[projection].gen + 1}
}

// park marks env's aggregate parked for projection, behind env.
func (pk *Parking) park(ctx context.Context, projection string, env event.Envelope, reason string) error {
	raw, err := json.Marshal(env)
	if err != nil {
		return err
	}
	defer pk.parkedCache.parked(projection) // also after a failure: it may have committed
	return pk.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.Tx.ExecContext(ctx, `
			INSERT INTO parked_aggregates (projection, stream_id, stream_type, merchant_id, reason, first_event_id, first_version)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (projection, stream_id) DO UPDATE
			SET reason = excluded.reason, attempts = parked_aggregates.attempts + 1, last_attempt_at = now()`,
			projection, env.StreamID, env.StreamType, env.MerchantID, reason, env.ID, env.Version); err != nil {
			return fmt.Errorf("park %s: %w", env.StreamID, err)
		}
		if _, err := tx.Tx.ExecContext(ctx, `
			INSERT INTO parked_events (projection, stream_id, version, event_id, type, envelope)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
			projection, env.StreamID, env.Version, env.ID, env.Type, string(raw)); err != nil {
			return fmt.Errorf("park event %s: %w", env.ID, err)
		}
		return nil
	})
}

// unavailableError is a message whose budget was spent on a database that
// could not be reached: like parkFailedError, it is not poisoned but
// redelivered.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "database unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// parkFailedError is a poisoned message whose aggregate could not be
// parked. It is not sent to the poison topic (which would ack it): it is
// redelivered, so no later event of its aggregate can overtake it.
type parkFailedError struct{ err error }

func (e *parkFailedError) Error() string { return "park failed: " + e.err.Error() }
func (e *parkFailedError) Unwrap() error { return e.err }

// middleware parks the aggregate of a message whose handler failed for
// good (retry budget spent or a permanent error). It sits between the
// poison queue and the retry middleware. pk may be nil: then it only
// counts.
func (pr *Projector) parkMiddleware() message.HandlerMiddleware {
	pk, m, log := pr.parking, pr.metrics, pr.log.With("component", "router")
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil || errors.As(err, new(*cancelledError)) {
				return out, err
			}
			name := message.HandlerNameFromCtx(msg.Context())
			if database.Unavailable(err) {
				// The database, not the event: parked, the aggregate would
				// wait for an operator after every outage longer than the
				// budget. Redelivered instead, it waits for the database
				// (a budget at a time), and nothing overtakes it.
				log.Warn("projection's database unavailable; the event is tried again", "projection", name,
					"message_uuid", msg.UUID, "error", err)
				return out, &unavailableError{err: err}
			}
			m.poison(name)
			var env event.Envelope
			if pk == nil || json.Unmarshal(msg.Payload, &env) != nil || env.StreamID == "" || env.Version < 1 || env.ID == "" {
				log.Error("event poisoned", "projection", name, "message_uuid", msg.UUID, "error", err)
				return out, err
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(msg.Context()), 10*time.Second)
			defer cancel()
			if perr := pk.park(ctx, name, env, err.Error()); perr != nil {
				return out, &parkFailedError{err: errors.Join(err, perr)}
			}
			log.Error("event poisoned, aggregate parked", "projection", name, "stream_id", env.StreamID,
				"version", env.Version, "event_id", env.ID, "error", err)
			return out, err
		}
	}
}

const parkedColumns = `a.projection, a.stream_id, a.stream_type, a.merchant_id, a.reason, a.first_event_id,
	a.first_version, a.since, a.attempts, a.last_attempt_at,
	(SELECT count(*) FROM parked_events e WHERE e.projection = a.projection AND e.stream_id = a.stream_id)`

func scanParked(row interface{ Scan(...any) error }) (ops.ParkedAggregate, error) {
	var a ops.ParkedAggregate
	err := row.Scan(&a.Projection, &a.StreamID, &a.StreamType, &a.MerchantID, &a.Reason, &a.FirstEventID,
		&a.FirstVersion, &a.Since, &a.Attempts, &a.LastAttemptAt, &a.Waiting)
	a.Since, a.LastAttemptAt = a.Since.UTC(), a.LastAttemptAt.UTC()
	return a, err
}

// List returns the parked aggregates of projection ("" for every
// projection), oldest first.
func (pk *Parking) List(ctx context.Context, projection string) ([]ops.ParkedAggregate, error) {
	if projection != "" {
		if _, err := pk.projection(projection); err != nil {
			return nil, err
		}
	}
	rows, err := pk.db.DB.QueryContext(ctx, `SELECT `+parkedColumns+` FROM parked_aggregates a
		WHERE $1 = '' OR a.projection = $1 ORDER BY a.since, a.projection, a.stream_id`, projection)
	if err != nil {
		return nil, fmt.Errorf("list parked aggregates: %w", err)
	}
	defer rows.Close()
	out := []ops.ParkedAggregate{}
	for rows.Next() {
		a, err := scanParked(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Get returns one parked aggregate with its waiting events, or
// apperr.ErrNotFound.
func (pk *Parking) Get(ctx context.Context, projection, streamID string) (ops.ParkedAggregate, error) {
	if _, err := pk.projection(projection); err != nil {
		return ops.ParkedAggregate{}, err
	}
	a, err := scanParked(pk.db.DB.QueryRowContext(ctx, `SELECT `+parkedColumns+` FROM parked_aggregates a
		WHERE a.projection = $1 AND a.stream_id = $2`, projection, streamID))
	if errors.Is(err, sql.ErrNoRows) {
		return ops.ParkedAggregate{}, apperr.ErrNotFound
	}
	if err != nil {
		return ops.ParkedAggregate{}, fmt.Errorf("get parked aggregate: %w", err)
	}
	rows, err := pk.db.DB.QueryContext(ctx, `SELECT event_id, type, version, parked_at FROM parked_events
		WHERE projection = $1 AND stream_id = $2 ORDER BY version`, projection, streamID)
	if err != nil {
		return ops.ParkedAggregate{}, fmt.Errorf("list parked events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e ops.ParkedEvent
		if err := rows.Scan(&e.EventID, &e.Type, &e.Version, &e.ParkedAt); err != nil {
			return ops.ParkedAggregate{}, err
		}
		e.ParkedAt = e.ParkedAt.UTC()
		a.Events = append(a.Events, e)
	}
	return a, rows.Err()
}

// Parked reports whether the merchant's aggregate is parked for projection
// (for the detail endpoints). Another merchant's aggregate reads as not
// parked.
func (pk *Parking) Parked(ctx context.Context, projection, merchantID, streamID string) (ops.ParkedAggregate, bool, error) {
	a, err := scanParked(pk.db.DB.QueryRowContext(ctx, `SELECT `+parkedColumns+` FROM parked_aggregates a
		WHERE a.projection = $1 AND a.stream_id = $2 AND a.merchant_id = $3`, projection, streamID, merchantID))
	if errors.Is(err, sql.ErrNoRows) {
		return ops.ParkedAggregate{}, false, nil
	}
	if err != nil {
		return ops.ParkedAggregate{}, false, fmt.Errorf("check parked aggregate: %w", err)
	}
	return a, true, nil
}

type waitingEvent struct {
	version int
	env     []byte
}

// lockParked locks the parked row for a replay or skip and reads its
// waiting events in version order, and whether the first of them has been
// tried (see Skip).
func lockParked(ctx context.Context, tx *sql.Tx, projection, streamID string) (_ []waitingEvent, firstTried bool, _ error) {
	err := tx.QueryRowContext(ctx, `SELECT first_tried FROM parked_aggregates WHERE projection = $1 AND stream_id = $2 FOR UPDATE`,
		projection, streamID).Scan(&firstTried)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, apperr.ErrNotFound
	}
	if err != nil {
		return nil, false, fmt.Errorf("lock parked aggregate: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT version, envelope FROM parked_events
		WHERE projection = $1 AND stream_id = $2 ORDER BY version`, projection, streamID)
	if err != nil {
		return nil, false, fmt.Errorf("read parked events: %w", err)
	}
	defer rows.Close()
	var out []waitingEvent
	for rows.Next() {
		var w waitingEvent
		if err := rows.Scan(&w.version, &w.env); err != nil {
			return nil, false, err
		}
		out = append(out, w)
	}
	return out, firstTried, rows.Err()
}

// audit records the entry audit returns for res in tx, when Audit is set.
func audit[R any](ctx context.Context, pk *Parking, tx bun.Tx, audit func(R) ops.AuditEntry, res R) error {
	if pk.Audit == nil || audit == nil {
		return nil
	}
	return pk.Audit(ctx, tx, audit(res))
}

// Replay applies the waiting events of one parked aggregate in version
// order (one recorded as skipped by a skip cut off before its commit, as
// skipped). When all apply, the aggregate is unparked; when one fails, the
// events before it are done, and the aggregate stays parked behind it with
// the new reason (the result's Error; not an error of Replay). The entry
// audit returns for the result is recorded in the replay's transaction.
func (pk *Parking) Replay(ctx context.Context, projection, streamID string, auditOf func(ops.ReplayResult) ops.AuditEntry) (ops.ReplayResult, error) {
	p, err := pk.projection(projection)
	if err != nil {
		return ops.ReplayResult{}, err
	}
	res := ops.ReplayResult{Projection: projection, StreamID: streamID}
	err = pk.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := pk.replay(ctx, tx, p, &res); err != nil {
			return err
		}
		return audit(ctx, pk, tx, auditOf, res)
	})
	if err != nil {
		return ops.ReplayResult{}, fmt.Errorf("replay %s %s: %w", projection, streamID, err)
	}
	return res, nil
}

// replay is Replay's work in its transaction.
func (pk *Parking) replay(ctx context.Context, tx bun.Tx, p Projection, res *ops.ReplayResult) error {
	projection, streamID := res.Projection, res.StreamID
	waiting, _, err := lockParked(ctx, tx.Tx, projection, streamID)
	if err != nil {
		return err
	}
	skipped, err := skippedWaiting(ctx, tx.Tx, projection, streamID)
	if err != nil {
		return err
	}
	for i, w := range waiting {
		var rec event.Recorded
		if skipped[w.version] {
			// A skip recorded but cut off before its commit (Skip): the
			// event is applied as it was skipped, as verify, rebuild and the
			// event feed read it, never as itself.
			if rec, err = event.Unmarshal(w.env, envelopeOnly); err == nil {
				rec = event.Skip(rec)
			}
		} else {
			rec, err = event.Unmarshal(w.env, p.Decode)
		}
		if err == nil {
			var filled int
			filled, err = pk.applyFillingGap(ctx, p, rec)
			res.Applied += filled
		}
		if err != nil {
			res.Error, res.Waiting = err.Error(), len(waiting)-i
			var first struct {
				ID string `json:"event_id"`
			}
			_ = json.Unmarshal(w.env, &first)
			if _, err := tx.Tx.ExecContext(ctx, `DELETE FROM parked_events WHERE projection = $1 AND stream_id = $2 AND version < $3`,
				projection, streamID, w.version); err != nil {
				return err
			}
			_, err = tx.Tx.ExecContext(ctx, `UPDATE parked_aggregates
				SET reason = $3, first_event_id = $4, first_version = $5, first_tried = true, attempts = attempts + 1, last_attempt_at = now()
				WHERE projection = $1 AND stream_id = $2`, projection, streamID, res.Error, first.ID, w.version)
			return err
		}
		res.Applied++
	}
	if _, err := tx.Tx.ExecContext(ctx, `DELETE FROM parked_events WHERE projection = $1 AND stream_id = $2`, projection, streamID); err != nil {
		return err
	}
	if _, err := tx.Tx.ExecContext(ctx, `DELETE FROM parked_aggregates WHERE projection = $1 AND stream_id = $2`, projection, streamID); err != nil {
		return err
	}
	res.Unparked = true
	return nil
}

// envelopeOnly decodes nothing: a skipped event is never decoded.
func envelopeOnly(string, []byte, ...[]byte) (event.Event, error) { return nil, nil }

// skippedWaiting returns the versions of the aggregate's events recorded
// in skipped_events for projection.
func skippedWaiting(ctx context.Context, tx *sql.Tx, projection, streamID string) (map[int]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version FROM skipped_events WHERE projection = $1 AND stream_id = $2`, projection, streamID)
	if err != nil {
		return nil, fmt.Errorf("read skipped events: %w", err)
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out[v] = true
	}
	return out, rows.Err()
}

// gap is the projection's error for an event whose predecessors the row
// has not applied (readmodel.GapError): the versions missing before it.
type gap interface{ Missing() (from, to int) }

// applyFillingGap applies rec through p. When the row lacks events before
// it (a gap: they never reached the projection, as when a consumer group
// was moved past messages retention had pruned), it applies those first,
// read from the events table, the source of truth, as the projection sees
// them (skipped ones as skipped), and then rec, and returns how many it
// filled in. Without this no tool could clear such an aggregate: skip
// applies a version bump, which the gap check refuses as well, and a
// rebuild keeps each row at the version its change log records.
func (pk *Parking) applyFillingGap(ctx context.Context, p Projection, rec event.Recorded) (int, error) {
	apply := func(r event.Recorded) error {
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		defer cancel()
		return p.Apply(actx, r)
	}
	err := apply(rec)
	var g gap
	if !errors.As(err, &g) {
		return 0, err
	}
	from, to := g.Missing()
	lctx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	streams, lerr := pk.log.Streams(lctx, p.Name, rec.StreamType, p.Decode, []string{rec.StreamID})
	cancel()
	if lerr != nil {
		return 0, errors.Join(err, fmt.Errorf("read the missing events: %w", lerr))
	}
	filled := 0
	for _, r := range streams[rec.StreamID] {
		if r.Version < from || r.Version > to {
			continue
		}
		if err := apply(r); err != nil {
			return filled, fmt.Errorf("fill in version %d (event %s): %w", r.Version, r.ID, err)
		}
		filled++
	}
	return filled, apply(rec)
}

// Skip skips the first waiting event of a parked aggregate (s.By and
// s.Reason are required; ops.Operator checks them): it records who skipped
// it and why (skipped_events), and applies it as event.Skipped, a version
// bump with change-log action "skipped", so that the next event follows
// it. s.EventID, when not empty, must name that first event; when empty,
// the first event must have been tried (it failed), not have become first
// by the skip of the one before it: two operators who each skip the event
// that failed, the second waiting for the first's lock, would otherwise
// skip the untried event behind it too, for good. The events
// behind it keep waiting (replay them next); when none do, the aggregate is
// unparked. The entry audit returns for the result is recorded in the
// skip's transaction. The skip itself (skipped_events) is recorded before
// the read model applies it, and stays if the skip is cut off after that:
// running it again, or a replay, finishes it.
func (pk *Parking) Skip(ctx context.Context, s ops.Skip, auditOf func(ops.SkipResult) ops.AuditEntry) (ops.SkipResult, error) {
	p, err := pk.projection(s.Projection)
	if err != nil {
		return ops.SkipResult{}, err
	}
	res := ops.SkipResult{Projection: s.Projection, StreamID: s.StreamID, SkippedBy: s.By, Reason: s.Reason}
	err = pk.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := pk.skip(ctx, tx, p, s.EventID, &res); err != nil {
			return err
		}
		return audit(ctx, pk, tx, auditOf, res)
	})
	if err != nil {
		return ops.SkipResult{}, fmt.Errorf("skip in %s %s: %w", s.Projection, s.StreamID, err)
	}
	return res, nil
}

// skip is Skip's work in its transaction.
func (pk *Parking) skip(ctx context.Context, tx bun.Tx, p Projection, eventID string, res *ops.SkipResult) error {
	projection, streamID, by, reason := res.Projection, res.StreamID, res.SkippedBy, res.Reason
	waiting, firstTried, err := lockParked(ctx, tx.Tx, projection, streamID)
	if err != nil {
		return err
	}
	if len(waiting) == 0 {
		return &apperr.RuleError{Rule: "parked.nothing_waiting", Detail: "no event waits; replay to unpark"}
	}
	// The envelope alone is enough: a skipped event is never decoded.
	rec, err := event.Unmarshal(waiting[0].env, envelopeOnly)
	if err != nil {
		return err
	}
	if eventID != "" && eventID != rec.ID {
		return &apperr.RuleError{Rule: "parked.skip_not_first",
			Detail: fmt.Sprintf("only the first waiting event can be skipped: %s (version %d)", rec.ID, rec.Version)}
	}
	if eventID == "" && !firstTried {
		return &apperr.RuleError{Rule: "parked.skip_untried",
			Detail: fmt.Sprintf("event %s (version %d) has not been tried since the event before it was skipped: replay to try it, or name it (event_id) to skip it untried", rec.ID, rec.Version)}
	}
	if rec.Version == 1 {
		return &apperr.RuleError{Rule: "parked.skip_first_event",
			Detail: fmt.Sprintf("event %s is the aggregate's first (version 1): skipped, it would leave no row to follow; fix its cause and replay", rec.ID)}
	}
	res.EventID, res.Version, res.Type = rec.ID, rec.Version, rec.Type
	// Recorded first, on its own (not in tx): the read model commits the
	// skipped event below in a transaction of its own, before tx commits,
	// so a skip cut off in between (a crash, a lost connection) must leave
	// the skip recorded, for the read model shows it. Running the skip
	// again, or a replay, then finishes it as a skip (replay applies a
	// waiting event recorded here as skipped), never applies the event as
	// itself, and verify, rebuild, the event feed and the relay, which go
	// by this table, agree with the read model.
	if _, err := pk.db.DB.ExecContext(ctx, `INSERT INTO skipped_events (projection, event_id, stream_id, version, type, skipped_by, reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
		projection, rec.ID, rec.StreamID, rec.Version, rec.Type, by, reason); err != nil {
		return fmt.Errorf("record skipped event: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	err = p.Apply(actx, event.Skip(rec))
	cancel()
	if err != nil {
		return fmt.Errorf("apply skipped event %s: %w", rec.ID, err)
	}
	if _, err := tx.Tx.ExecContext(ctx, `DELETE FROM parked_events WHERE projection = $1 AND stream_id = $2 AND version = $3`,
		projection, streamID, rec.Version); err != nil {
		return err
	}
	res.Waiting = len(waiting) - 1
	if res.Waiting == 0 {
		res.Unparked = true
		_, err = tx.Tx.ExecContext(ctx, `DELETE FROM parked_aggregates WHERE projection = $1 AND stream_id = $2`, projection, streamID)
		return err
	}
	var next struct {
		ID string `json:"event_id"`
	}
	_ = json.Unmarshal(waiting[1].env, &next)
	_, err = tx.Tx.ExecContext(ctx, `UPDATE parked_aggregates SET reason = $3, first_event_id = $4, first_version = $5, first_tried = false
		WHERE projection = $1 AND stream_id = $2`, projection, streamID,
		fmt.Sprintf("version %d skipped by %s (%s); replay the events behind it", rec.Version, by, reason), next.ID, waiting[1].version)
	return err
}
