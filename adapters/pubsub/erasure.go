package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"hearth/adapters/vault"
	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/plan"
	"hearth/domain/webhook"
	"hearth/internal/aggregates"
	"hearth/internal/database"
	"hearth/internal/refdata"
)

// staffKeyNamesInAudit finds the audit entries that name a worker key of
// the staff member $1, whose names a staff erasure empties: by an index
// (admin_audit_staff), since the log is never pruned and the look runs
// under the staff member's lock.
const staffKeyNamesInAudit = `details->>'staff_id' = $1::uuid::text AND details->>'name' <> ''`

// subjectTables are the reference tables of the data subjects, with the
// statement that empties a row's personal columns (the row and its id stay:
// references remain valid). A staff member's working hours go too: their
// exceptions say when they were off sick; and the names of their worker
// keys, in the keys and in the keys' audit entries, are emptied: a key for
// a person is named after them ("Sam's phone"). The keys are locked in id
// order, as the erasures' other rows are.
var subjectTables = map[string]struct{ table, scrub string }{
	event.SubjectCustomer: {"customers",
		`UPDATE customers SET name = '', phone = '', email = '', address = '', notes = '',
		        erased_at = coalesce(erased_at, now()), updated_at = now()
		 WHERE id = $1 AND merchant_id = $2 RETURNING erased_at`},
	event.SubjectStaffMember: {"staff",
		`WITH hours AS (DELETE FROM staff_hours WHERE staff_id = $1 AND merchant_id = $2),
		      named AS (SELECT id FROM api_keys WHERE staff_id = $1 AND merchant_id = $2 AND name <> '' ORDER BY id FOR UPDATE),
		      keys AS (UPDATE api_keys k SET name = '' FROM named WHERE k.id = named.id),
		      audit AS (UPDATE admin_audit SET details = jsonb_set(details, '{name}', '""')
		                WHERE ` + staffKeyNamesInAudit + `)
		 UPDATE staff SET name = '', phone = '', active = false, erased_at = coalesce(erased_at, now()), updated_at = now()
		 WHERE id = $1 AND merchant_id = $2 RETURNING erased_at`},
}

// EraseSubject implements ops.ErasureStore: in one transaction of the event
// store, it empties the subject's reference row, deletes its data key and
// records it erased, appends PersonalDataErased to every stream holding an
// event sealed for it that has none after that event yet (so running it
// again finishes what a crash left, and marks streams written meanwhile),
// deletes the stored idempotent answers that name the subject or one of
// those streams, empties the receivers' error texts of their webhook
// deliveries, ends a customer's service plans that have not ended (the
// visit generator creates no more orders for a person erased), and records
// audit's entry. An unknown subject (or another merchant's) is
// apperr.ErrNotFound and changes nothing.
func (s *Store) EraseSubject(ctx context.Context, req ops.ErasureRequest, audit func(ops.Erasure) ops.AuditEntry) (ops.Erasure, error) {
	sub, ok := subjectTables[req.SubjectType]
	if !ok {
		return ops.Erasure{}, fmt.Errorf("erase: unknown subject type %q", req.SubjectType)
	}
	out := ops.Erasure{SubjectType: req.SubjectType, SubjectID: req.SubjectID}
	err := database.WithConn(ctx, s.db.DB, func(conn *pgx.Conn) error {
		tx := &pipe{conn: conn}
		var at time.Time
		found := false
		// The subject's lock first, alone (vault.EraseLockSQL): the writes
		// sealing for it that began before are waited for, so that the
		// statements after it see their events and data keys; those that
		// begin later wait, and then find the subject erased.
		b := &pgx.Batch{}
		b.Queue(vault.EraseLockSQL, req.SubjectID).Exec(func(pgconn.CommandTag) error { return nil })
		if req.SubjectType == event.SubjectStaffMember {
			// Their worker keys' locks, before their row: the writes of
			// those keys that passed their check are waited for
			// (refdata.StaffKeysLockSQL).
			b.Queue(refdata.StaffKeysLockSQL, req.MerchantID, req.SubjectID).Exec(func(pgconn.CommandTag) error { return nil })
		}
		b.Queue(sub.scrub, req.SubjectID, req.MerchantID).QueryRow(maybeRow(&found, &at))
		if err := tx.send(ctx, b); err != nil {
			return fmt.Errorf("erase %s %s: %w", req.SubjectType, req.SubjectID, err)
		}
		if !found {
			return apperr.ErrNotFound
		}
		out.ErasedAt = at.UTC()
		b = &pgx.Batch{}
		first := false // this run erases the subject for the first time
		b.Queue(`INSERT INTO erased_subjects (subject_id, merchant_id, subject_type, erased_by) VALUES ($1, $2, $3, $4)
			ON CONFLICT (subject_id) DO NOTHING RETURNING true`, req.SubjectID, req.MerchantID, req.SubjectType, req.By).Query(
			func(rows pgx.Rows) error {
				for rows.Next() {
					first = true
				}
				return rows.Err()
			})
		b.Queue(`DELETE FROM data_keys WHERE subject_id = $1`, req.SubjectID)
		if req.SecondPass {
			// The record of the second pass this one is: not a later one,
			// which an erasure run again meanwhile recorded (its own second
			// pass clears it).
			b.Queue(`DELETE FROM erasure_second_passes WHERE subject_id = $1 AND due_at <= $2`, req.SubjectID, req.Due)
		} else {
			// The second pass, recorded in this transaction, due when no
			// instance can still seal with the key deleted above (by this
			// database's clock, which the worker reads too): whatever
			// becomes of the caller, a worker runs it. Run again before it
			// ran, the erasure keeps the later due time.
			b.Queue(`INSERT INTO erasure_second_passes (subject_id, merchant_id, subject_type, requested_by, correlation_id, due_at)
				VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
				ON CONFLICT (subject_id) DO UPDATE SET due_at = greatest(erasure_second_passes.due_at, excluded.due_at),
					requested_by = excluded.requested_by, correlation_id = excluded.correlation_id
				RETURNING due_at`, req.SubjectID, req.MerchantID, req.SubjectType, req.By, req.CorrelationID, req.Settle.Seconds()).
				QueryRow(func(row pgx.Row) error {
					if err := row.Scan(&out.SecondPassDue); err != nil {
						return err
					}
					out.SecondPassDue = out.SecondPassDue.UTC()
					return nil
				})
		}
		// The bookings of the schedules to mark, locked before the streams
		// are read. A command appends to a schedule and its order, in
		// either order, holding the schedule's booking (Book); the erasure
		// appends in stream id order: without the booking, each could
		// append to one of the two and wait for the other's append to the
		// second (a deadlock). NOWAIT: a command that holds a booking may
		// wait for the subject's lock, which the erasure holds; a held
		// booking is a conflict, and the erasure runs again.
		b.Queue(`SELECT 1 FROM bookings WHERE schedule_id IN (SELECT stream_id FROM events
			WHERE subject_id = $1 AND merchant_id = $2 AND stream_type = $3) ORDER BY schedule_id FOR UPDATE NOWAIT`,
			req.SubjectID, req.MerchantID, ScheduleStream.Type).Query(func(rows pgx.Rows) error {
			rows.Close()
			var pgErr *pgconn.PgError
			if err := rows.Err(); errors.As(err, &pgErr) && pgErr.Code == "55P03" {
				return &apperr.ConflictError{Detail: fmt.Sprintf("a schedule of %s %s is being written; run the erasure again", req.SubjectType, req.SubjectID)}
			} else if err != nil {
				return err
			}
			return nil
		})
		// The streams to mark: a sealed event of the subject after the
		// stream's last PersonalDataErased of it (if any).
		var streams []struct {
			typ, id string
			version int
		}
		b.Queue(`
			SELECT e.stream_type, e.stream_id::text, (SELECT max(version) FROM events v WHERE v.stream_id = e.stream_id)
			FROM events e
			WHERE e.subject_id = $1 AND e.merchant_id = $2
			GROUP BY e.stream_type, e.stream_id
			HAVING max(e.position) > coalesce((SELECT max(x.position) FROM events x
				WHERE x.stream_id = e.stream_id AND x.type = $3 AND x.data->>'subject_id' = $1::text), 0)
			ORDER BY e.stream_id`, req.SubjectID, req.MerchantID, event.PersonalDataErasedType).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var st struct {
					typ, id string
					version int
				}
				if err := rows.Scan(&st.typ, &st.id, &st.version); err != nil {
					return err
				}
				streams = append(streams, st)
			}
			return rows.Err()
		})
		// The customer's plans not ended yet, with their last versions.
		type live struct {
			id      string
			version int
		}
		var plans []live
		if req.SubjectType == event.SubjectCustomer {
			b.Queue(`
				SELECT p.stream_id::text, max(p.version) FROM events p
				WHERE p.stream_type = $3 AND p.merchant_id = $2 AND p.stream_id IN (SELECT c.stream_id FROM events c
					WHERE c.stream_type = $3 AND c.merchant_id = $2 AND c.version = 1 AND c.data->>'customer_id' = $1::text)
				GROUP BY p.stream_id HAVING NOT bool_or(p.type = $4)
				ORDER BY p.stream_id`, req.SubjectID, req.MerchantID, PlanStream.Type, plan.Ended{}.EventType()).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var p live
					if err := rows.Scan(&p.id, &p.version); err != nil {
						return err
					}
					plans = append(plans, p)
				}
				return rows.Err()
			})
		}
		if err := tx.send(ctx, b); err != nil {
			return fmt.Errorf("erase %s %s: %w", req.SubjectType, req.SubjectID, err)
		}
		b = &pgx.Batch{}
		meta := event.Meta{MerchantID: req.MerchantID, Actor: req.By, CorrelationID: req.CorrelationID, OccurredAt: time.Now()}
		ids := []string{req.SubjectID}
		var appends []*appended
		for _, st := range streams {
			facts, ok := aggregates.ByType(st.typ)
			if !ok {
				return fmt.Errorf("erase: stream %s has type %q, not an aggregate type", st.id, st.typ)
			}
			a, err := s.queueAppend(ctx, b, facts, meta, st.id, "", false, st.version,
				[]event.Event{event.PersonalDataErased{SubjectType: req.SubjectType, SubjectID: req.SubjectID}})
			if err != nil {
				return err
			}
			ids = append(ids, st.id)
			appends = append(appends, a)
		}
		out.Streams = len(streams)
		for _, p := range plans {
			a, err := s.queueAppend(ctx, b, PlanStream, meta, p.id, "", false, p.version, []event.Event{plan.Ended{At: event.Instant(meta.OccurredAt)}})
			if err != nil {
				return err
			}
			appends = append(appends, a)
		}
		out.PlansEnded = len(plans)
		if first { // the public customer.erased or staff_member.erased
			if _, err := s.queueAppend(ctx, b, aggregates.Subjects, meta, req.SubjectID, "", false, 0,
				[]event.Event{event.SubjectErased{SubjectType: req.SubjectType, SubjectID: req.SubjectID}}); err != nil {
				return err
			}
		}
		// Stored answers of writes about the subject: any that names it or
		// one of its streams.
		queueForgetAnswers(b, req.MerchantID, ids, &out.IdempotentAnswers)
		// Of every aggregate sealed for the subject, not only those this
		// pass marks: an attempt in flight during an earlier pass may have
		// recorded its receiver's words after it.
		b.Queue(scrubSubjectDeliveryErrorsSQL, req.SubjectID, req.MerchantID)
		entry := audit(out)
		details, err := json.Marshal(entry.Details)
		if err != nil {
			return err
		}
		b.Queue(`INSERT INTO admin_audit (actor, action, target, details) VALUES ($1, $2, $3, $4::jsonb)`,
			entry.Actor, entry.Action, entry.Target, string(details))
		queueCommit(b)
		if err := tx.send(ctx, b); err != nil {
			return fmt.Errorf("erase %s %s: %w", req.SubjectType, req.SubjectID, err)
		}
		for _, a := range appends {
			out.Position = max(out.Position, a.position)
		}
		return nil
	})
	// A webhook delivery round records its attempts, then claims the next
	// deliveries: its locks are not in one id order, and the rows it will
	// claim are known only inside its claim, so it can meet the scrub of
	// their error texts (in id order) in a deadlock. When Postgres ends
	// one by aborting the erasure, the pass is a conflict like a write to
	// one of the subject's streams: nothing of it committed, and running
	// it again (ops.Erasures does) finds the round gone.
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
		return ops.Erasure{}, &apperr.ConflictError{Detail: fmt.Sprintf(
			"the erasure of %s %s met a webhook delivery round in a deadlock; run it again", req.SubjectType, req.SubjectID)}
	}
	if err != nil {
		return ops.Erasure{}, err
	}
	if s.vault != nil {
		s.vault.Forget(req.SubjectID)
	}
	return out, nil
}

// PendingErasures implements ops.ErasureStore: the records of the second
// passes not run yet, the earliest due first, only those due by this
// database's clock when dueOnly; at most limit (0: all).
func (s *Store) PendingErasures(ctx context.Context, dueOnly bool, limit int) ([]ops.PendingErasure, error) {
	q := `SELECT subject_id::text, merchant_id::text, subject_type, requested_by, correlation_id, due_at
		FROM erasure_second_passes WHERE NOT $1 OR due_at <= now() ORDER BY due_at, subject_id`
	args := []any{dueOnly}
	if limit > 0 {
		q += ` LIMIT $2`
		args = append(args, limit)
	}
	rows, err := s.db.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("pending erasures: %w", err)
	}
	defer rows.Close()
	out := []ops.PendingErasure{}
	for rows.Next() {
		var p ops.PendingErasure
		r := &p.Request
		if err := rows.Scan(&r.SubjectID, &r.MerchantID, &r.SubjectType, &r.By, &r.CorrelationID, &p.Due); err != nil {
			return nil, fmt.Errorf("pending erasures: %w", err)
		}
		p.Due = p.Due.UTC()
		r.Confirm, r.Due = r.SubjectID, p.Due
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pending erasures: %w", err)
	}
	return out, nil
}

// queueForgetAnswers queues the deletion of the merchant's stored answers
// of writes that name one of ids (a subject, its streams), counting them
// in n. Their keys are kept in idempotency_forgotten (internal/idempotency
// says how they answer): deleted with them, the keys would look never used,
// and a retry would run its write again, a customer's creation making the
// erased person anew.
//
// The answers are found through the ids their bodies name
// (idempotency_keys_names, migration eventstore/034), not by searching
// every answer of the merchant for each id: that read IDEMPOTENCY_KEEP of
// the merchant's writes, once per stream of the subject, under the
// subject's lock and the request's statement timeout. They are deleted by
// the row versions found and locked (ctid): joined back on the key, the
// planner may hash the merchant's whole table for a few rows.
//
// The answers are locked first in key order, then deleted. Two erasures of
// different subjects (a customer and the staff member who served them, or
// protect beside an erasure) can both match one answer, and a DELETE locks
// rows in the order its scan meets them: a sequential scan of a table past
// a quarter of shared_buffers is synchronized (it starts where a scan under
// way is, and wraps around), and a cached generic plan may read the
// primary key where a fresh one reads the heap, so two deletes could each
// hold a row the other waits for (a deadlock). Sorted, every transaction
// takes them in one order. (Two erasures of one subject never get here
// together: each takes the subject's lock, alone, first.)
func queueForgetAnswers(b *pgx.Batch, merchantID string, ids []string, n *int) {
	b.Queue(`WITH named AS (
			SELECT ctid FROM idempotency_keys WHERE merchant_id = $1 AND body IS NOT NULL
			AND hearth_answer_names(body) && $2::text[]::uuid[]
			ORDER BY scope, key FOR UPDATE),
		deleted AS (
			DELETE FROM idempotency_keys k WHERE k.ctid = ANY (ARRAY(SELECT ctid FROM named))
			RETURNING k.merchant_id, k.scope, k.key, k.header ->> 'Location' AS location, k.created_at)
		INSERT INTO idempotency_forgotten (merchant_id, scope, key, location, created_at)
		SELECT merchant_id, scope, key, location, created_at FROM deleted
		ON CONFLICT (merchant_id, scope, key) DO NOTHING`,
		merchantID, ids).Exec(func(tag pgconn.CommandTag) error { *n += int(tag.RowsAffected()); return nil })
}

// scrubDeliveryErrors is the statement that replaces the receivers' error
// texts of the webhook deliveries of the aggregates that match (a
// condition on aggregate_id): a receiver that refused a body may have
// quoted it.
//
// The deliveries are locked first in id order, then updated, for the
// reason the stored answers are (queueForgetAnswers): two erasures of
// different customers (an aggregate that changed hands holds events
// sealed for both) or protect beside an erasure can both match one
// aggregate's deliveries, and an UPDATE locks rows in the order its scan
// meets them (synchronized sequential scans of a table past a quarter of
// shared_buffers; a hash of aggregates that orders them by its size). The
// appends before it do not always serialise the two: an erasure run again
// appends to no stream already marked, and protect marks only the streams
// of the customers erased before their events were sealed. The webhook
// worker that fails a disabled endpoint's pending deliveries, some of them
// tried already (with an error text), locks them in id order too
// (webhooks' failPendingSQL, a batch at a time).
func scrubDeliveryErrors(aggregates string) string {
	return `WITH named AS (
			SELECT id FROM webhook_deliveries WHERE ` + aggregates + ` AND error <> '' AND error <> '` + webhook.ErasedError + `'
			ORDER BY id FOR UPDATE)
		UPDATE webhook_deliveries d SET error = '` + webhook.ErasedError + `' FROM named WHERE d.id = named.id`
}

var (
	// scrubDeliveryErrorsSQL scrubs those of the aggregates $1 (protect).
	scrubDeliveryErrorsSQL = scrubDeliveryErrors(`aggregate_id = ANY ($1::text[]::uuid[])`)
	// scrubSubjectDeliveryErrorsSQL scrubs those of every aggregate with
	// an event sealed for the subject $1 of merchant $2 (the erasure).
	scrubSubjectDeliveryErrorsSQL = scrubDeliveryErrors(
		`aggregate_id IN (SELECT stream_id FROM events WHERE subject_id = $1 AND merchant_id = $2)`)
)

// ErasedSubjects implements ops.ErasureRecordStore: every subject recorded
// erased, the earliest erased first.
func (s *Store) ErasedSubjects(ctx context.Context) ([]ops.ErasedSubject, error) {
	rows, err := s.db.DB.QueryContext(ctx, `SELECT subject_type, subject_id::text, merchant_id::text, erased_at
		FROM erased_subjects ORDER BY erased_at, subject_id`)
	if err != nil {
		return nil, fmt.Errorf("erased subjects: %w", err)
	}
	defer rows.Close()
	out := []ops.ErasedSubject{}
	for rows.Next() {
		var e ops.ErasedSubject
		if err := rows.Scan(&e.SubjectType, &e.SubjectID, &e.MerchantID, &e.ErasedAt); err != nil {
			return nil, fmt.Errorf("erased subjects: %w", err)
		}
		e.ErasedAt = e.ErasedAt.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("erased subjects: %w", err)
	}
	return out, nil
}

// Subjects implements ops.ErasureRecordStore: the customers and staff
// members of ids, whatever their merchant, and whether each is recorded
// erased.
func (s *Store) Subjects(ctx context.Context, ids []string) (map[string]ops.SubjectOnRecord, error) {
	rows, err := s.db.DB.QueryContext(ctx, `WITH held AS (
			SELECT id, merchant_id, 'customer' AS subject_type FROM customers WHERE id = ANY ($1::text[]::uuid[])
			UNION ALL SELECT id, merchant_id, 'staff_member' FROM staff WHERE id = ANY ($1::text[]::uuid[]))
		SELECT h.id::text, h.merchant_id::text, h.subject_type, e.subject_id IS NOT NULL
		FROM held h LEFT JOIN erased_subjects e ON e.subject_id = h.id`, ids)
	if err != nil {
		return nil, fmt.Errorf("find subjects: %w", err)
	}
	defer rows.Close()
	out := map[string]ops.SubjectOnRecord{}
	for rows.Next() {
		var id string
		var h ops.SubjectOnRecord
		if err := rows.Scan(&id, &h.MerchantID, &h.SubjectType, &h.Erased); err != nil {
			return nil, fmt.Errorf("find subjects: %w", err)
		}
		out[id] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find subjects: %w", err)
	}
	return out, nil
}
