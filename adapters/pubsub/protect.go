package pubsub

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"hearth/adapters/vault"
	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
	"hearth/internal/database"
)

// legacy is an event written in clear (before personal fields were sealed)
// that app protect seals.
type legacy struct {
	position int64
	id       string
	facts    Stream
	streamID string
	version  int
	merchant string
	typ      string
	data     []byte
	subject  string // its customer, once found
}

// personalTypes are the stored event types that have personal fields.
func personalTypes() []string {
	var out []string
	for _, f := range aggregates.All() {
		for t := range f.Personal {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// ProtectEvents implements ops.ProtectStore: in one transaction, it seals
// up to limit events after position after whose type has personal fields
// and whose data holds no sealed member, as the store seals what it
// appends: each under its customer's data key (vault.KeySQL: created when
// the customer has none), events.subject_id set so that erasure finds it.
// The customer is the one the aggregate had at that event: the order's or
// service request's customer_id folded up to it, a schedule's own
// customer_id or else its order's customer at the schedule event's
// position.
//
// An event of a customer erased before it was sealed is sealed under a key
// made for it and never stored: the vault reads the fields of an erased
// subject as erased (the marker naming them) without opening the box, and
// nobody can open it. Its aggregate gets PersonalDataErased in the same
// transaction, so the read models re-fold it and forget the fields (the
// erasure could not find the event while its subject_id was null).
func (s *Store) ProtectEvents(ctx context.Context, by string, after int64, limit int) (ops.Protection, int64, error) {
	if s.vault == nil {
		return ops.Protection{}, 0, errors.New("protect: the store has no vault (MASTER_KEY)")
	}
	var out ops.Protection
	var last int64
	err := database.WithConn(ctx, s.db.DB, func(conn *pgx.Conn) error {
		tx := &pipe{conn: conn}
		page, err := s.legacyPage(ctx, tx, after, limit)
		if err != nil || len(page) == 0 {
			if err == nil && tx.begun {
				err = tx.send(ctx, commitBatch())
			}
			return err
		}
		last = page[len(page)-1].position
		out.Found = len(page)
		if err := s.findSubjects(ctx, tx, page); err != nil {
			return err
		}
		keys, created, err := s.protectKeys(ctx, tx, page)
		if err != nil {
			return err
		}
		out.Keys = created
		shredder, err := throwaway()
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		// The aggregates to mark: by stream, the erased customers met.
		type mark struct {
			facts              Stream
			streamID, merchant string
			subjects           []string
		}
		var marks []*mark
		for _, e := range page {
			fields := e.facts.Personal[e.typ]
			var sealed []byte
			var err error
			if keys[e.subject] {
				sealed, err = s.vault.Seal(e.subject, e.typ, e.data, fields)
			} else {
				sealed, err = vault.SealWith(shredder, e.subject, e.typ, e.data, fields)
			}
			if err != nil {
				return fmt.Errorf("event %s: %w", e.id, err)
			}
			if bytes.Equal(sealed, e.data) { // none of its personal fields is there
				continue
			}
			b.Queue(`UPDATE events SET data = $2, subject_id = $3 WHERE position = $1`, e.position, string(sealed), e.subject)
			if keys[e.subject] {
				out.Sealed++
				continue
			}
			out.Shredded++
			i := slices.IndexFunc(marks, func(m *mark) bool { return m.streamID == e.streamID })
			if i < 0 {
				i = len(marks)
				marks = append(marks, &mark{facts: e.facts, streamID: e.streamID, merchant: e.merchant})
			}
			if !slices.Contains(marks[i].subjects, e.subject) {
				marks[i].subjects = append(marks[i].subjects, e.subject)
			}
		}
		// The bookings of the schedules to mark, locked before their
		// versions are read, as the erasure does (EraseSubject): a command
		// appends to a schedule and its order, in either order, holding the
		// schedule's booking, and one that writes nothing personal (a
		// status change) may write an erased customer's aggregates; this
		// batch appends in the order its page met the streams, so without
		// the booking each could wait for the other's append (a deadlock:
		// the command a 500, the run failed). NOWAIT: a command holding a
		// booking may wait for a data key's row this batch holds (KeySQL);
		// a held booking is a conflict, and the batch runs again.
		var schedules []string
		for _, m := range marks {
			if m.facts.Type == ScheduleStream.Type {
				schedules = append(schedules, m.streamID)
			}
		}
		if len(schedules) > 0 {
			if err := lockBookings(ctx, tx, schedules); err != nil {
				return err
			}
		}
		var appends []*appended
		marked := map[string][]string{} // stream ids by merchant
		for _, m := range marks {
			marked[m.merchant] = append(marked[m.merchant], m.streamID)
			version, err := s.lastVersion(ctx, tx, m.streamID)
			if err != nil {
				return err
			}
			meta := event.Meta{MerchantID: m.merchant, Actor: by, CorrelationID: uuid.New(), OccurredAt: time.Now()}
			var erased []event.Event
			for _, subject := range m.subjects {
				erased = append(erased, event.PersonalDataErased{SubjectType: event.SubjectCustomer, SubjectID: subject})
			}
			a, err := s.queueAppend(ctx, b, m.facts, meta, m.streamID, "", false, version, erased)
			if err != nil {
				return err
			}
			appends = append(appends, a)
		}
		// The copies an erasure deletes or replaces, which the erasure
		// could not find for these streams (their events named no subject).
		for merchant, ids := range marked {
			queueForgetAnswers(b, merchant, ids, new(int))
			b.Queue(scrubDeliveryErrorsSQL, ids)
		}
		queueCommit(b)
		if err := tx.send(ctx, b); err != nil {
			return fmt.Errorf("seal events after position %d: %w", after, err)
		}
		out.Streams = len(marks)
		for _, a := range appends {
			out.Position = max(out.Position, a.position)
		}
		return nil
	})
	if err != nil {
		return ops.Protection{}, 0, err
	}
	return out, last, nil
}

// legacyPage reads, and locks, the next events in clear with personal
// fields (a concurrent run skips them once they are sealed).
func (s *Store) legacyPage(ctx context.Context, tx *pipe, after int64, limit int) ([]*legacy, error) {
	var page []*legacy
	b := &pgx.Batch{}
	b.Queue(`
		SELECT position, event_id::text, stream_type, stream_id::text, version, merchant_id::text, type, data
		FROM events WHERE position > $1 AND type = ANY ($2) AND NOT data ? 'sealed'
		ORDER BY position LIMIT $3 FOR UPDATE`, after, personalTypes(), limit).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var e legacy
			var streamType string
			if err := rows.Scan(&e.position, &e.id, &streamType, &e.streamID, &e.version, &e.merchant, &e.typ, &e.data); err != nil {
				return err
			}
			f, ok := aggregates.ByType(streamType)
			if !ok || len(f.Personal[e.typ]) == 0 {
				return fmt.Errorf("event %s: type %s of stream type %q has no personal fields", e.id, e.typ, streamType)
			}
			e.facts = f
			page = append(page, &e)
		}
		return rows.Err()
	})
	if err := tx.send(ctx, b); err != nil {
		return nil, fmt.Errorf("read events in clear after position %d: %w", after, err)
	}
	return page, nil
}

// stored is an event of a stream as stored, decoded without opening
// anything (the ids it needs are in clear).
type stored struct {
	version  int
	position int64
	event    event.Event
}

// loadStreams reads whole streams, decoded as stored, by stream id.
func loadStreams(ctx context.Context, tx *pipe, ids []string) (map[string][]stored, error) {
	out := map[string][]stored{}
	b := &pgx.Batch{}
	b.Queue(`SELECT stream_id::text, stream_type, version, position, type, data FROM events
		WHERE stream_id = ANY ($1::text[]::uuid[]) ORDER BY stream_id, version`, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id, streamType, typ string
			var st stored
			var data []byte
			if err := rows.Scan(&id, &streamType, &st.version, &st.position, &typ, &data); err != nil {
				return err
			}
			f, ok := aggregates.ByType(streamType)
			if !ok {
				return fmt.Errorf("stream %s has type %q, not an aggregate type", id, streamType)
			}
			e, err := f.Decode(typ, data)
			if err != nil {
				return fmt.Errorf("stream %s version %d: %w", id, st.version, err)
			}
			st.event = e
			out[id] = append(out[id], st)
		}
		return rows.Err()
	})
	if err := tx.send(ctx, b); err != nil {
		return nil, fmt.Errorf("load streams: %w", err)
	}
	return out, nil
}

// upTo returns the first events of a stream, as long as keep holds.
func upTo(stream []stored, keep func(stored) bool) []event.Event {
	var out []event.Event
	for _, st := range stream {
		if !keep(st) {
			break
		}
		out = append(out, st.event)
	}
	return out
}

// findSubjects sets each event's subject: the customer its aggregate had
// at that event.
func (s *Store) findSubjects(ctx context.Context, tx *pipe, page []*legacy) error {
	var ids []string
	for _, e := range page {
		if !slices.Contains(ids, e.streamID) {
			ids = append(ids, e.streamID)
		}
	}
	streams, err := loadStreams(ctx, tx, ids)
	if err != nil {
		return err
	}
	orderOf := map[*legacy]string{} // schedules that do not name their customer
	for _, e := range page {
		prefix := upTo(streams[e.streamID], func(st stored) bool { return st.version <= e.version })
		switch e.facts.Type {
		case OrderStream.Type:
			o, err := aggregates.Order.Rehydrate(prefix)
			if err != nil {
				return fmt.Errorf("order %s: %w", e.streamID, err)
			}
			e.subject = o.CustomerID()
		case ServiceRequestStream.Type:
			r, err := aggregates.ServiceRequest.Rehydrate(prefix)
			if err != nil {
				return fmt.Errorf("service request %s: %w", e.streamID, err)
			}
			e.subject = r.CustomerID()
		case ScheduleStream.Type:
			sch, err := aggregates.Schedule.Rehydrate(prefix)
			if err != nil {
				return fmt.Errorf("schedule %s: %w", e.streamID, err)
			}
			if e.subject = sch.CustomerID(); e.subject == "" {
				orderOf[e] = sch.OrderID()
			}
		}
	}
	if len(orderOf) > 0 {
		var orders []string
		for _, id := range orderOf {
			if !slices.Contains(orders, id) {
				orders = append(orders, id)
			}
		}
		if streams, err = loadStreams(ctx, tx, orders); err != nil {
			return err
		}
		for e, orderID := range orderOf {
			// The order's customer when the schedule's event was written.
			prefix := upTo(streams[orderID], func(st stored) bool { return st.position < e.position })
			o, err := aggregates.Order.Rehydrate(prefix)
			if err != nil {
				return fmt.Errorf("order %s of schedule %s: %w", orderID, e.streamID, err)
			}
			e.subject = o.CustomerID()
		}
	}
	for _, e := range page {
		if _, ok := uuid.Parse(e.subject); !ok {
			return fmt.Errorf("event %s of %s %s: no customer found (%q)", e.id, e.facts.Type, e.streamID, e.subject)
		}
	}
	return nil
}

// protectKeys gets or creates the data key of every customer of the page
// (as a command's session does) and has the vault adopt it. It returns, by
// customer, whether they have a key (false: erased), and how many keys it
// created.
func (s *Store) protectKeys(ctx context.Context, tx *pipe, page []*legacy) (map[string]bool, int, error) {
	keys := map[string]bool{}
	created := 0
	merchants := map[string]string{}
	var subjects []string
	for _, e := range page {
		if _, ok := merchants[e.subject]; !ok {
			merchants[e.subject] = e.merchant
			subjects = append(subjects, e.subject)
		}
	}
	slices.Sort(subjects)
	b := &pgx.Batch{}
	// Each customer's lock, shared, as a write that seals for them takes
	// it (vault.CustomerWriteSQL), before their data key's statement: an
	// erasure in flight is waited for, and KeySQL, a statement of its own,
	// then sees the customer erased; without it, a batch beside the
	// erasure's pass stored a key for the erased customer and sealed
	// their events under it as a live customer's, marking nothing, where
	// that pass could not find them (subject_id still null). An erasure
	// that begins later waits for this batch, and finds what it sealed.
	// Shared locks, in id order: batches and writes never wait for each
	// other here.
	for _, subject := range subjects {
		b.Queue(`SELECT pg_advisory_xact_lock_shared(hearth_subject_lock($1))`, subject).Exec(func(pgconn.CommandTag) error { return nil })
	}
	for _, subject := range subjects {
		keys[subject] = false
		fresh, err := s.vault.NewKey(subject)
		if err != nil {
			return nil, 0, err
		}
		b.Queue(vault.KeySQL, subject, merchants[subject], event.SubjectCustomer, fresh).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var sealed []byte
				if err := rows.Scan(&sealed); err != nil {
					return err
				}
				if err := s.vault.Adopt(subject, sealed); err != nil {
					return err
				}
				keys[subject] = true
				if bytes.Equal(sealed, fresh) {
					created++
				}
			}
			return rows.Err()
		})
	}
	if err := tx.send(ctx, b); err != nil {
		return nil, 0, fmt.Errorf("data keys: %w", err)
	}
	return keys, created, nil
}

// lockBookings locks the bookings of schedules, NOWAIT: one a command
// holds is an *apperr.ConflictError.
func lockBookings(ctx context.Context, tx *pipe, schedules []string) error {
	b := &pgx.Batch{}
	b.Queue(`SELECT 1 FROM bookings WHERE schedule_id = ANY ($1::text[]::uuid[]) ORDER BY schedule_id FOR UPDATE NOWAIT`,
		schedules).Query(func(rows pgx.Rows) error {
		rows.Close()
		var pgErr *pgconn.PgError
		if err := rows.Err(); errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return &apperr.ConflictError{Detail: "a schedule to mark erased is being written; run protect again"}
		} else if err != nil {
			return err
		}
		return nil
	})
	if err := tx.send(ctx, b); err != nil {
		return fmt.Errorf("lock bookings: %w", err)
	}
	return nil
}

// lastVersion is a stream's last version.
func (s *Store) lastVersion(ctx context.Context, tx *pipe, streamID string) (int, error) {
	var v int
	if err := tx.queryRow(ctx, func(row pgx.Row) error { return row.Scan(&v) },
		`SELECT coalesce(max(version), 0) FROM events WHERE stream_id = $1`, streamID); err != nil {
		return 0, fmt.Errorf("last version of stream %s: %w", streamID, err)
	}
	return v, nil
}

// throwaway is a data key that is never stored: what seals the fields of a
// customer erased before they were sealed, so that nobody can open them.
func throwaway() (cipher.AEAD, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("protect: random key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func commitBatch() *pgx.Batch {
	b := &pgx.Batch{}
	queueCommit(b)
	return b
}

// copyTables are the tables that keep copies of events' envelopes, with
// the event's id, paged by their primary key: the aggregates' topics and
// the poison queue.
func copyTables() []string {
	var out []string
	for _, f := range aggregates.All() {
		out = append(out, "watermill_"+f.Topic)
	}
	return append(out, "watermill_"+TopicPoison)
}

// uuidPattern guards the cast of a Watermill message's uuid to an event id.
const uuidPattern = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`

// ProtectCopies implements ops.ProtectStore: every copy of an event's
// envelope (the topic tables, the poison queue, parked events) whose data
// is in clear while the event is sealed gets the event's sealed data, the
// topic tables in pages of limit messages, each page one statement.
func (s *Store) ProtectCopies(ctx context.Context, limit int) (int, error) {
	total := 0
	for _, table := range copyTables() {
		xid, offset := "0", int64(0)
		for {
			var n int
			var lastXID *string
			var lastOffset *int64
			err := s.db.DB.QueryRowContext(ctx, fmt.Sprintf(`
				WITH page AS (
					SELECT transaction_id, "offset" FROM %[1]q
					WHERE (transaction_id, "offset") > ($1::xid8, $2::bigint)
					ORDER BY transaction_id, "offset" LIMIT $3),
				done AS (
					UPDATE %[1]q w SET payload = jsonb_set(w.payload::jsonb, '{data}', e.data)::json
					FROM page p, events e
					WHERE w.transaction_id = p.transaction_id AND w."offset" = p."offset"
					  AND e.event_id = CASE WHEN w.uuid ~ $4 THEN w.uuid::uuid END
					  AND e.data ? 'sealed' AND NOT (w.payload::jsonb -> 'data' ? 'sealed')
					RETURNING 1)
				SELECT (SELECT count(*) FROM done), last.transaction_id::text, last."offset"
				FROM (SELECT 1) one LEFT JOIN
				     (SELECT transaction_id, "offset" FROM page ORDER BY transaction_id DESC, "offset" DESC LIMIT 1) last ON true`,
				table), xid, offset, limit, uuidPattern).Scan(&n, &lastXID, &lastOffset)
			if err != nil {
				return total, fmt.Errorf("rewrite the copies in %s: %w", table, err)
			}
			total += n
			if lastXID == nil {
				break
			}
			xid, offset = *lastXID, *lastOffset
		}
	}
	// Parked events wait for an operator: few, in one statement.
	res, err := s.db.DB.ExecContext(ctx, `
		UPDATE parked_events p SET envelope = jsonb_set(p.envelope, '{data}', e.data)
		FROM events e
		WHERE e.event_id = p.event_id AND e.data ? 'sealed' AND NOT (p.envelope -> 'data' ? 'sealed')`)
	if err != nil {
		return total, fmt.Errorf("rewrite the copies in parked_events: %w", err)
	}
	n, _ := res.RowsAffected()
	return total + int(n), nil
}
