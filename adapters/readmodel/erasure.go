package readmodel

import (
	"context"
	"fmt"
	"slices"

	"github.com/uptrace/bun"

	"hearth/adapters/vault"
	"hearth/domain/event"
	"hearth/internal/advisory"
	"hearth/internal/aggregates"
	"hearth/internal/database"
)

// Refold is what projections need to forget an erased subject: when one
// meets a PersonalDataErased event, it reads the stream before it again
// through Decoders' Erasing (the subject's sealed fields read as erased,
// whatever any cache holds) and rewrites the row and every change-log
// snapshot of the aggregate from that fold, in the transaction that applies
// the event. Because the event has its place in the stream, every earlier
// event was applied before (the version guard), so nothing applied later
// can bring the erased text back.
type Refold struct {
	// Log reads the event store (pubsub.EventLog). Required.
	Log EventLog
	// Decoders open sealed fields (the vault). Default aggregates.Plain.
	Decoders aggregates.Decoders
}

// updateChangesSQL rewrites the snapshots of one aggregate's change-log
// rows, by version.
const updateChangesSQL = `UPDATE change_log c SET before = u.before, after = u.after
	FROM unnest($3::int[], $4::text[]::jsonb[], $5::text[]::jsonb[]) AS u(version, before, after)
	WHERE c.aggregate_type = $1 AND c.aggregate_id = $2 AND c.version = u.version`

// erase applies a PersonalDataErased event r to its aggregate's row: the
// stream is folded again from its first event, and the row and the change
// log rewritten from that fold.
func (p *projection[V]) erase(ctx context.Context, tx bun.Tx, r event.Recorded) error {
	view, found, err := p.load(ctx, tx, r.StreamID)
	if err != nil {
		return fmt.Errorf("lock %s %s: %w", p.agg.Table, r.StreamID, err)
	}
	merchantID, version := p.meta(view)
	switch {
	case found && merchantID != r.MerchantID:
		return fmt.Errorf("%s %s belongs to merchant %s, event %s says %s", p.agg.Table, r.StreamID, merchantID, r.ID, r.MerchantID)
	case r.Version <= version:
		return nil // applied already
	case r.Version != version+1:
		return &GapError{AggregateID: r.StreamID, RowVersion: version, Version: r.Version}
	}
	return p.foldErased(ctx, tx, r, found, r.Version)
}

// ForgetParked is erase for an aggregate whose events wait behind a parked
// one (PersonalDataErased among them): its row and change log, at the
// version they reached, are folded again with the erased subject's fields
// read as erased, and their version does not move, so the events waiting
// still apply in order once replayed (PersonalDataErased included). Until
// then the row shows what it showed, less the subject's text.
func (p *projection[V]) ForgetParked(ctx context.Context, r event.Recorded) error {
	if _, ok := r.Event.(event.PersonalDataErased); !ok {
		return fmt.Errorf("%s %s: event %s is a %s, not PersonalDataErased", p.agg.Type, r.StreamID, r.ID, r.Type)
	}
	return p.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		view, found, err := p.load(ctx, tx, r.StreamID)
		if err != nil {
			return fmt.Errorf("lock %s %s: %w", p.agg.Table, r.StreamID, err)
		}
		merchantID, version := p.meta(view)
		switch {
		case !found || version == 0:
			return nil // nothing shown yet
		case merchantID != r.MerchantID:
			return fmt.Errorf("%s %s belongs to merchant %s, event %s says %s", p.agg.Table, r.StreamID, merchantID, r.ID, r.MerchantID)
		case r.Version <= version:
			return nil // applied already
		}
		return p.foldErased(ctx, tx, r, true, version)
	})
}

// foldErased folds the stream of r (a PersonalDataErased event) again up to
// version upto with r's subject erased, and rewrites the row and the
// change-log snapshots up to there; when upto is r's own version, r is
// applied too (its change-log row written). found says whether the row
// exists.
func (p *projection[V]) foldErased(ctx context.Context, tx bun.Tx, r event.Recorded, found bool, upto int) error {
	erased := r.Event.(event.PersonalDataErased)
	if p.refold.Log == nil {
		return fmt.Errorf("%s %s: this projection cannot apply an erasure (no event log to fold again)", p.agg.Type, r.StreamID)
	}
	// The event log's read is a transaction of its own: the fencing check
	// (WithBegin) belongs to tx, and would refuse the log's read-only one.
	streams, err := p.refold.Log.Streams(database.WithoutBegin(ctx), p.agg.Projection, p.agg.Type,
		aggregates.Or(p.refold.Decoders).Erasing(p.agg, erased.SubjectID), []string{r.StreamID})
	if err != nil {
		return fmt.Errorf("read %s %s again to erase subject %s: %w", p.agg.Type, r.StreamID, erased.SubjectID, err)
	}
	applying := upto == r.Version
	var stream []event.Recorded
	for _, rec := range streams[r.StreamID] {
		if rec.Version < r.Version && rec.Version <= upto {
			stream = append(stream, rec)
		}
	}
	if want := min(upto, r.Version-1); len(stream) != want {
		return fmt.Errorf("%s %s: the event store holds %d events up to version %d", p.agg.Type, r.StreamID, len(stream), want)
	}
	if applying {
		stream = append(stream, r)
	}
	fresh := p.empty()
	var before *string
	versions := make([]int32, 0, len(stream))
	befores, afters := make([]*string, 0, len(stream)), make([]string, 0, len(stream))
	var last *changeRow
	for _, rec := range stream {
		change, err := p.step(fresh, rec.Version > 1, rec, nil)
		if err != nil {
			return fmt.Errorf("%s %s: fold again at version %d: %w", p.agg.Type, r.StreamID, rec.Version, err)
		}
		if rec.Version == r.Version {
			last = change
			break
		}
		after := string(change.After)
		versions, befores, afters = append(versions, int32(rec.Version)), append(befores, before), append(afters, after)
		before = &after
	}
	if applying {
		err = p.write(ctx, tx, p.save(tx, fresh, !found), []changeRow{*last})
	} else {
		_, err = tx.NewRaw("?", p.save(tx, fresh, false)).Exec(ctx)
	}
	if err != nil {
		return fmt.Errorf("write %s %s: %w", p.agg.Table, r.StreamID, err)
	}
	if _, err := tx.Tx.ExecContext(ctx, updateChangesSQL, r.StreamType, r.StreamID, versions, befores, afters); err != nil {
		return fmt.Errorf("erase the change log of %s %s: %w", p.agg.Type, r.StreamID, err)
	}
	// A rebuild's shadow table that no rebuild holds (its process died
	// after folding) keeps the rows as its fold opened them, this one's
	// among them: no rebuild swaps it in any more, so it goes.
	shadow := shadowOf(p.agg.Table)
	var leftover bool
	if err := tx.Tx.QueryRowContext(ctx, leftoverShadowSQL, shadow, advisory.Key(advisory.Rebuild(p.agg.Projection))).Scan(&leftover); err != nil {
		return fmt.Errorf("look for a shadow table %s left by a rebuild: %w", shadow, err)
	}
	if leftover {
		if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS ?`, bun.Ident(shadow)); err != nil {
			return fmt.Errorf("drop the shadow table %s left by a rebuild: %w", shadow, err)
		}
	}
	return nil
}

// hasErasure reports whether recs hold a PersonalDataErased event.
func hasErasure(recs []event.Recorded) bool {
	for _, r := range recs {
		if _, ok := r.Event.(event.PersonalDataErased); ok {
			return true
		}
	}
	return false
}

// erasedSubjects returns the subjects of the PersonalDataErased events in
// stream.
func erasedSubjects(stream []event.Recorded) []string {
	var out []string
	for _, r := range stream {
		if e, ok := r.Event.(event.PersonalDataErased); ok && !slices.Contains(out, e.SubjectID) {
			out = append(out, e.SubjectID)
		}
	}
	return out
}

// erasing is dec's decoder of f with the sealed fields of every subject
// named read as erased, whatever a cache holds; the others open as usual.
func erasing(dec aggregates.Decoders, f aggregates.Facts, subjects []string) event.Decoder {
	plain := dec.Decoder(f)
	bySubject := make(map[string]event.Decoder, len(subjects))
	for _, s := range subjects {
		bySubject[s] = dec.Erasing(f, s)
	}
	return func(eventType string, data []byte, more ...[]byte) (event.Event, error) {
		if s, err := vault.SealedBy(data); err == nil {
			if d, ok := bySubject[s]; ok {
				return d(eventType, data, more...)
			}
		}
		return plain(eventType, data, more...)
	}
}

// readErased reads again, through log, every stream of streams that holds
// a PersonalDataErased event, with its erased subjects' fields read as
// erased, up to the version it reached, and puts it in the stream's place.
// The whole-log readers (rebuild, verify) decode through the vault, whose
// cache may still hold a key the erasure has just deleted (vault.CacheFor):
// folded with it, the row would show the text the live projection, which
// folds such a stream with Erasing, has erased; and a rebuild would swap
// it back in at the version the change log records, where no later event
// folds it away. wrap, when set, wraps the decoder (verify's tolerant).
func readErased(ctx context.Context, log EventLog, dec aggregates.Decoders, f aggregates.Facts, wrap func(event.Decoder) event.Decoder,
	streams map[string][]event.Recorded) error {
	dec = aggregates.Or(dec)
	for id, stream := range streams {
		subjects := erasedSubjects(stream)
		if len(subjects) == 0 {
			continue
		}
		d := erasing(dec, f, subjects)
		if wrap != nil {
			d = wrap(d)
		}
		again, err := log.Streams(ctx, f.Projection, f.Type, d, []string{id})
		if err != nil {
			return fmt.Errorf("read %s %s again with subjects %v erased: %w", f.Type, id, subjects, err)
		}
		last := stream[len(stream)-1].Version
		read := again[id]
		for len(read) > 0 && read[len(read)-1].Version > last {
			read = read[:len(read)-1] // written since: the caller's read ends before them
		}
		if len(read) != len(stream) {
			return fmt.Errorf("%s %s: read again, the event store holds %d events up to version %d, not %d", f.Type, id, len(read), last, len(stream))
		}
		streams[id] = read
	}
	return nil
}
