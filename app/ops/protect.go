package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"hearth/domain/apperr"
)

// ActionPersonalDataProtect is the audit log's action of bringing events
// written before personal fields were sealed under the same protection (app
// protect). Its details are counts, never values.
const ActionPersonalDataProtect = "personal_data.protect"

// ProtectBatchDefault and ProtectBatchMax bound how many events one
// transaction of Protect seals.
const (
	ProtectBatchDefault = 500
	ProtectBatchMax     = 10_000
)

// ProtectRequest is one run of Protect: who runs it, and how many events
// each transaction seals (0: ProtectBatchDefault).
type ProtectRequest struct {
	By    string
	Batch int
}

// Check validates the request (fields "by" and "batch") and fills in the
// default batch.
func (r *ProtectRequest) Check() error {
	r.By = strings.TrimSpace(r.By)
	if err := CheckActor(r.By); err != nil {
		return err
	}
	if r.Batch == 0 {
		r.Batch = ProtectBatchDefault
	}
	if r.Batch < 1 || r.Batch > ProtectBatchMax {
		return apperr.Invalid("batch", "must be between 1 and %d, got %d", ProtectBatchMax, r.Batch)
	}
	return nil
}

// Protection counts what a run of Protect (or one batch of it) did.
type Protection struct {
	// Found counts the events in clear whose type has personal fields.
	Found int
	// Sealed counts those sealed under their customer's data key.
	Sealed int
	// Shredded counts those of customers erased before they were sealed:
	// sealed under a key that is never stored, so that they read as erased.
	Shredded int
	// Keys counts the data keys created for customers who had none.
	Keys int
	// Streams counts the aggregates of erased customers marked
	// (PersonalDataErased appended), so that the read models re-fold them
	// and forget the fields; Position is the last such event's position.
	Streams  int
	Position int64
	// Copies counts the copies of sealed events rewritten (topic tables,
	// the poison queue, parked events).
	Copies int
	// Batches counts the transactions that sealed events.
	Batches int
}

func (p *Protection) add(q Protection) {
	p.Found += q.Found
	p.Sealed += q.Sealed
	p.Shredded += q.Shredded
	p.Keys += q.Keys
	p.Streams += q.Streams
	p.Position = max(p.Position, q.Position)
	p.Copies += q.Copies
	p.Batches += q.Batches
}

// ProtectStore seals the events of the event store written in clear
// (pubsub.Store). Each call is one transaction (ProtectCopies: one per
// page), and safe to run again: what is sealed is not touched.
type ProtectStore interface {
	// ProtectEvents seals up to limit events in clear after position
	// after, in position order, by is the actor of the events it appends,
	// and returns what it did and the position of the last event it looked
	// at (0 when there was none). A stream written meanwhile, or a
	// booking of a schedule it marks held by a command, is an
	// *apperr.ConflictError, and the batch changed nothing.
	ProtectEvents(ctx context.Context, by string, after int64, limit int) (Protection, int64, error)
	// ProtectCopies rewrites every copy of a sealed event still in clear
	// with the sealed data, pages of limit rows each, and returns how many.
	ProtectCopies(ctx context.Context, limit int) (int, error)
}

// Protector is the use case of `app protect`.
type Protector struct {
	store ProtectStore
	audit AuditLog
	sleep func(ctx context.Context, d time.Duration) error
}

// NewProtector returns the use case.
func NewProtector(store ProtectStore, audit AuditLog) (*Protector, error) {
	if store == nil || audit == nil {
		return nil, errors.New("ops.NewProtector: store and audit are required")
	}
	return &Protector{store: store, audit: audit, sleep: sleepCtx}, nil
}

// Protect seals the personal fields of every event written before they
// were sealed (docs/personal-data.md): each one under its customer's data
// key, created when the customer has none, and subject_id set so that
// erasure finds it; an erased customer's events under a key never stored,
// their aggregates marked so that the read models forget the fields. Then
// it rewrites the copies of those events still in clear. Batches commit one
// by one: a run stopped half-way keeps what it did, and running it again
// finishes (and, once done, changes nothing). The run is recorded in the
// audit log with its counts, also when it fails.
func (p *Protector) Protect(ctx context.Context, req ProtectRequest) (Protection, error) {
	if err := req.Check(); err != nil {
		return Protection{}, err
	}
	var out Protection
	err := p.run(ctx, req.By, req.Batch, &out)
	// Recorded even when stopped half-way: what was sealed stays sealed.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	details := map[string]any{"events_found": out.Found, "sealed": out.Sealed, "shredded": out.Shredded,
		"data_keys_created": out.Keys, "streams_marked": out.Streams, "copies_rewritten": out.Copies,
		"batches": out.Batches, "complete": err == nil}
	if aerr := p.audit.RecordAudit(actx, AuditEntry{Actor: req.By, Action: ActionPersonalDataProtect,
		Target: "events", Details: details}); aerr != nil {
		err = errors.Join(err, aerr)
	}
	return out, err
}

// conflictRetries is how many times a batch runs again when a stream it
// marks was written meanwhile, or a schedule's booking was held.
const conflictRetries = 5

func (p *Protector) run(ctx context.Context, by string, batch int, out *Protection) error {
	var after int64
	for retries := 0; ; {
		b, last, err := p.store.ProtectEvents(ctx, by, after, batch)
		if conflict := new(apperr.ConflictError); errors.As(err, &conflict) && retries < conflictRetries {
			retries++
			// A moment for the command that holds the stream or its
			// booking to commit: run again at once, the batch would most
			// likely meet it again and the run give up.
			if err := p.sleep(ctx, time.Duration(retries)*10*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		retries = 0
		if err != nil {
			return fmt.Errorf("protect events after position %d: %w", after, err)
		}
		if last == 0 {
			break
		}
		b.Batches = 1
		out.add(b)
		after = last
	}
	n, err := p.store.ProtectCopies(ctx, batch)
	out.Copies += n
	if err != nil {
		return fmt.Errorf("protect copies of events: %w", err)
	}
	return nil
}
