package projector

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"hearth/domain/event"
	"hearth/internal/tracing"

	"hearth/adapters/pubsub"
)

// Lookahead lets a live handler apply a burst in one read-model
// transaction. watermill-sql's subscriber reads up to 100 messages per
// query but hands them over one at a time, waiting for each ack, so a
// burst would cost a read-model transaction per event. The subscriber's
// schema adapter (Lookahead.schema) remembers the messages its current
// query returned; the handler of message M applies M and the messages
// fetched after it with Projection.ApplyBatch (version guard, gap check,
// change log and fence unchanged), and acks those later messages without
// work when the subscriber hands them over.
//
// Nothing is acked that is not applied: the subscriber still acks in
// order, after each handler returns. When the batch fails (a poison event
// in it, a gap, a parked aggregate), the handler applies M alone, and the
// messages of that batch are applied one by one, with their retries and
// poison queue, as without lookahead. Under light load a query returns one
// message and nothing changes.
type Lookahead struct {
	mu     sync.Mutex
	groups map[string]*fetched
}

// NewLookahead returns a lookahead for the subscribers and handlers of one
// router.
func NewLookahead() *Lookahead { return &Lookahead{groups: map[string]*fetched{}} }

// fetched is what the current query of one consumer group's subscriber
// returned, and which of those messages a handler applied ahead of their
// delivery or must apply one by one.
type fetched struct {
	mu   sync.Mutex
	msgs []*message.Message
	// ahead holds the messages applied with an earlier one; alone, those
	// of a batch that failed, the first one included: each is applied by
	// itself, on every attempt, until the next query.
	ahead, alone map[string]bool
}

func (l *Lookahead) of(group string) *fetched {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.groups[group]
	if !ok {
		f = &fetched{}
		l.groups[group] = f
	}
	return f
}

// schema is keyset, the Postgres schema of group's subscriber, noting the
// messages of each query.
func (l *Lookahead) schema(group string, keyset pubsub.KeysetSchema) wsql.SchemaAdapter {
	return lookaheadSchema{KeysetSchema: keyset, f: l.of(group)}
}

type lookaheadSchema struct {
	pubsub.KeysetSchema
	f *fetched
}

// SelectQuery starts a new query: the messages of the last one have all
// been handed over (the subscriber queries again only then).
func (s lookaheadSchema) SelectQuery(topic, group string, offsets wsql.OffsetsAdapter) wsql.Query {
	s.f.mu.Lock()
	s.f.msgs, s.f.alone = s.f.msgs[:0], nil
	s.f.mu.Unlock()
	return s.KeysetSchema.SelectQuery(topic, group, offsets)
}

func (s lookaheadSchema) UnmarshalMessage(row wsql.Scanner) (wsql.Row, error) {
	r, err := s.KeysetSchema.UnmarshalMessage(row)
	if err == nil {
		s.f.mu.Lock()
		s.f.msgs = append(s.f.msgs, r.Msg)
		s.f.mu.Unlock()
	}
	return r, err
}

// appliedAhead reports whether msg was applied with an earlier message,
// and forgets it.
func (f *fetched) appliedAhead(msg *message.Message) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ahead[msg.UUID] {
		delete(f.ahead, msg.UUID)
		return true
	}
	return false
}

// following returns the messages fetched after msg, unless msg belongs to
// a batch that failed.
func (f *fetched) following(msg *message.Message) []*message.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.alone[msg.UUID] {
		return nil
	}
	i := slices.IndexFunc(f.msgs, func(m *message.Message) bool { return m.UUID == msg.UUID })
	if i < 0 {
		return nil
	}
	return slices.Clone(f.msgs[i+1:])
}

// settle records how the batch of first and later ended: the later
// messages were applied, or every message of it must be applied alone (a
// retry of first included).
func (f *fetched) settle(first *message.Message, later []*message.Message, applied bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	set := make(map[string]bool, len(later)+1)
	for _, m := range later {
		set[m.UUID] = true
	}
	if applied {
		f.ahead = set
		return
	}
	set[first.UUID] = true
	f.ahead, f.alone = nil, set
}

// applyAhead applies rec (of msg) and the decodable messages fetched after
// it in one transaction, and reports whether it did. It does nothing
// (false) when nothing follows msg, when p has no ApplyBatch or there is no lookahead, when msg
// belongs to a batch that failed, or when an aggregate of the batch is
// parked; it reports false, logged, when the batch fails: the caller then
// applies rec alone, and so are the batch's other messages, retries
// included.
func (pr *Projector) applyAhead(ctx context.Context, l *Lookahead, p Projection, msg *message.Message, rec event.Recorded) bool {
	if l == nil || p.ApplyBatch == nil {
		return false
	}
	f := l.of(p.Name)
	skipped, err := pr.skips.of(ctx, p.Name)
	if err != nil {
		return false // the handler reads them again for msg, and reports it
	}
	var later []*message.Message
	recs := []event.Recorded{rec}
	for _, next := range f.following(msg) {
		r, err := unmarshal(next.Payload, p, skipped)
		if err != nil {
			break // the handler of that message reports it
		}
		later, recs = append(later, next), append(recs, r)
	}
	if len(later) == 0 {
		return false
	}
	if pr.parking != nil {
		parked, err := pr.parking.anyParked(ctx, p.Name, recs)
		if err != nil || parked {
			f.settle(msg, later, false)
			return false
		}
	}
	// Half the attempt at most: the fallback to rec alone keeps the rest.
	batchCtx, cancel := context.WithTimeout(ctx, AttemptTimeout/2)
	defer cancel()
	if span := trace.SpanFromContext(ctx); span.IsRecording() { // the attempt's (startApply)
		metadata := make([]map[string]string, len(later))
		for i, m := range later {
			metadata[i] = m.Metadata
		}
		for _, l := range tracing.Links(metadata...) {
			span.AddLink(l)
		}
		span.SetAttributes(attribute.Int("hearth.batch", len(recs)))
	}
	start := time.Now()
	err = p.ApplyBatch(batchCtx, recs, nil)
	pr.metrics.observeBatch(p.Name, time.Since(start), len(recs), err)
	f.settle(msg, later, err == nil)
	if err != nil {
		pr.log.With("component", "router").Debug("lookahead batch failed; its events are applied one by one", "projection", p.Name, "events", len(recs), "error", err)
		return false
	}
	return true
}

// anyParked reports whether an aggregate of recs is parked for projection.
// Only the router parks, between two messages of a handler, so none can be
// parked between this check and the batch it guards.
func (pk *Parking) anyParked(ctx context.Context, projection string, recs []event.Recorded) (bool, error) {
	if maybe, err := pk.anyParkedFor(ctx, projection); err != nil || !maybe {
		return maybe, err
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.StreamID
	}
	var parked bool
	err := pk.db.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM parked_aggregates WHERE projection = $1 AND stream_id = ANY($2::text[]::uuid[]))`,
		projection, ids).Scan(&parked)
	if err != nil {
		return false, fmt.Errorf("check parking of %d aggregates: %w", len(ids), err)
	}
	return parked, nil
}
