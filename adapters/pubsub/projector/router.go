package projector

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"hearth/domain/event"
	"hearth/internal/aggregates"
	"hearth/internal/tracing"

	"hearth/adapters/pubsub"
)

// Projection is a read model fed from one topic. Name is also its consumer
// group, so each projection keeps its own offset.
type Projection struct {
	Name   string
	Topic  string
	Decode event.Decoder
	Apply  func(ctx context.Context, r event.Recorded) error
	// ApplyBatch applies events in order in one read-model transaction,
	// running alsoInTx (when set) inside it before the commit. Optional:
	// without it, the projection has no catch-up path (see CatchUp).
	ApplyBatch func(ctx context.Context, recs []event.Recorded, alsoInTx func(ctx context.Context, tx bun.Tx) error) error
	// ForgetParked, when set, is given a PersonalDataErased event that
	// parking holds back behind a parked event of its aggregate: the read
	// model forgets the erased subject's fields in what it shows already,
	// without moving the row's version (readmodel's ForgetParked), rather
	// than show them until an operator replays the aggregate.
	ForgetParked func(ctx context.Context, r event.Recorded) error
	// Prefetch, when set, is given each catch-up page's payloads before
	// they are decoded, so that Decode's lookups can be made for the page
	// at once (the vault's data keys: vault.Prefetch).
	Prefetch func(payloads [][]byte)
}

// ProjectionOf returns the projection of an aggregate type's events that
// runs apply and applyBatch: its name, topic and decoder are the aggregate
// type's (internal/aggregates).
func ProjectionOf(a aggregates.Facts, apply func(ctx context.Context, r event.Recorded) error,
	applyBatch func(ctx context.Context, recs []event.Recorded, alsoInTx func(ctx context.Context, tx bun.Tx) error) error) Projection {
	return Projection{Name: a.Projection, Topic: a.Topic, Decode: a.Decode, Apply: apply, ApplyBatch: applyBatch}
}

// Retry budget of every projection handler: 200 ms doubling to 5 s, 10
// retries (about 31 s of sleeping). AckDeadline is set well above it, so a
// message is never cancelled half-way through its budget (past the
// deadline watermill-sql cancels the context, the offset does not move and
// the message would loop for ever); MaxElapsedTime bounds the budget in
// case attempts themselves are slow.
const (
	RetryInitial    = 200 * time.Millisecond
	RetryMultiplier = 2
	RetryMax        = 5 * time.Second
	RetryCount      = 10
	RetryMaxElapsed = 60 * time.Second
	AckDeadline     = 2 * time.Minute
	// AttemptTimeout bounds one attempt of a handler.
	AttemptTimeout = 10 * time.Second
)

// RouterConfig is what NewRouter needs.
type RouterConfig struct {
	// Subscriber makes the subscriber of one consumer group: watermill-sql
	// in production (SQLSubscribers), gochannel in handler-level tests.
	Subscriber func(consumerGroup string) (message.Subscriber, error)
	// Poison receives messages whose retry budget ran out, on pubsub.TopicPoison.
	Poison message.Publisher
	// Log defaults to slog.Default().
	Log *slog.Logger
	// RetryInitial overrides the first retry interval (tests shorten the
	// budget with it). Defaults to RetryInitial.
	RetryInitial time.Duration
	// RetryClock is the time the retry budget runs on. Nil: real time
	// (tests pass a fake that records the waits).
	RetryClock Clock
	// Parking parks the aggregate of a poisoned event and holds its later
	// events back (see Parking). Optional: without it a poisoned event is
	// only copied to the poison topic, and the gap check then refuses the
	// aggregate's later events one by one.
	Parking *Parking
	// Metrics counts applied events, retries, poisoned events and handler
	// durations. Optional.
	Metrics *Metrics
	// Lookahead, when set, lets each handler apply the messages its
	// subscriber fetched after the one it is handed in the same
	// transaction (see Lookahead); the subscribers must come from
	// NotifyingSubscribers with the same Lookahead.
	Lookahead *Lookahead
	// Registry, when set, receives Watermill's router metrics (namespace
	// hearth, subsystem watermill). Registering again for the router of the
	// next leadership term reuses the collectors.
	Registry prometheus.Registerer
	// Tracer gives each apply a span, in the trace of the write that
	// published the message (its metadata's trace context). Optional:
	// without it, no span.
	Tracer trace.Tracer
}

// NewRouter builds a router that feeds the projections, for a transport
// of the caller's choosing (gochannel in handler-level tests, the bench's
// own subscribers). Routers are single-use: build a new one for each
// leadership term.
func NewRouter(cfg RouterConfig, projections ...Projection) (*message.Router, error) {
	if cfg.Subscriber == nil || cfg.Poison == nil {
		return nil, errors.New("projector.NewRouter: Subscriber and Poison are required")
	}
	pr := &Projector{
		log: cmp.Or(cfg.Log, slog.Default()), retryInitial: cfg.RetryInitial, retryClock: cfg.RetryClock,
		parking: cfg.Parking, metrics: cfg.Metrics, registry: cfg.Registry, tracer: cfg.Tracer, projections: projections,
	}
	return pr.router(cfg.Subscriber, cfg.Poison, cfg.Lookahead)
}

// router builds the router of one term: subscriber makes each projection's
// subscriber, poisoned messages go to poisonPub, and ahead (optional) is the
// lookahead shared with those subscribers.
func (pr *Projector) router(subscriber func(consumerGroup string) (message.Subscriber, error), poisonPub message.Publisher, ahead *Lookahead) (*message.Router, error) {
	wlog := watermill.NewSlogLogger(pr.log.With("component", "router"))
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 15 * time.Second}, wlog)
	if err != nil {
		return nil, err
	}
	poison, err := middleware.PoisonQueueWithFilter(poisonPub, pubsub.TopicPoison, func(err error) bool {
		return !errors.As(err, new(*cancelledError)) && !errors.As(err, new(*parkFailedError)) && !errors.As(err, new(*unavailableError))
	})
	if err != nil {
		return nil, err
	}
	if pr.registry != nil {
		metrics.NewPrometheusMetricsBuilder(pr.registry, "hearth", "watermill").AddPrometheusRouterMetrics(router)
	}
	router.AddMiddleware(
		poison,
		pr.parkMiddleware(),
		markCancelled,
		Retry{
			InitialInterval: cmp.Or(pr.retryInitial, RetryInitial),
			Multiplier:      RetryMultiplier,
			MaxInterval:     RetryMax,
			MaxRetries:      RetryCount,
			MaxElapsedTime:  RetryMaxElapsed,
			Permanent:       isPermanent,
			OnRetry:         pr.logRetry(),
			Clock:           pr.retryClock,
		}.Middleware,
		middleware.Recoverer,
	)
	for _, p := range pr.projections {
		sub, err := subscriber(p.Name)
		if err != nil {
			return nil, fmt.Errorf("subscriber for %s: %w", p.Name, err)
		}
		router.AddConsumerHandler(p.Name, p.Topic, sub, pr.handler(p, ahead))
	}
	return router, nil
}

// handler applies one message through p.Apply, unless its aggregate is
// parked: then the event waits in parked_events (see Parking). With a
// lookahead, it applies the messages fetched after it in the same
// transaction when it can, and acks those without work when they come.
func (pr *Projector) handler(p Projection, ahead *Lookahead) message.NoPublishHandlerFunc {
	return func(msg *message.Message) (err error) {
		if ahead != nil && ahead.of(p.Name).appliedAhead(msg) {
			return nil
		}
		skipped, err := pr.skips.of(msg.Context(), p.Name)
		if err != nil {
			return fmt.Errorf("message %s: %w", msg.UUID, err) // retried
		}
		rec, err := unmarshal(msg.Payload, p, skipped)
		var temporary interface{ Temporary() bool }
		switch {
		case errors.As(err, &temporary) && temporary.Temporary():
			return fmt.Errorf("message %s: %w", msg.UUID, err) // a data key could not be read: retry
		case err != nil:
			// A payload that does not parse will not parse on a retry, nor
			// will one whose subject's data key is missing: its aggregate
			// parks, with the reason.
			return &permanentError{err: fmt.Errorf("message %s: %w", msg.UUID, err)}
		}
		ctx, cancel := context.WithTimeout(msg.Context(), AttemptTimeout)
		defer cancel()
		if pr.tracer != nil {
			var span trace.Span
			ctx, span = pr.startApply(ctx, p, msg, rec)
			defer func() { tracing.End(span, err) }()
		}
		if pr.applyAhead(ctx, ahead, p, msg, rec) {
			return nil
		}
		if pr.parking != nil {
			held, err := pr.parking.hold(ctx, p.Name, rec)
			if err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
			if held {
				if _, erasure := rec.Event.(event.PersonalDataErased); erasure && p.ForgetParked != nil {
					// Retried on failure: holding it again changes nothing.
					if err := p.ForgetParked(ctx, rec); err != nil {
						return fmt.Errorf("%s: forget the erased subject in parked %s: %w", p.Name, rec.StreamID, err)
					}
				}
				return nil
			}
		}
		start := time.Now()
		err = p.Apply(ctx, rec)
		pr.metrics.observe(p.Name, time.Since(start), err)
		if err != nil {
			return fmt.Errorf("%s: apply %s v%d of %s: %w", p.Name, rec.Type, rec.Version, rec.StreamID, err)
		}
		return nil
	}
}

// startApply starts the span of an attempt to apply rec (of msg) to p: a
// child of the span that published msg, when its metadata carries one.
// When the attempt applies the messages fetched after msg too
// (applyAhead), the span links theirs.
func (pr *Projector) startApply(ctx context.Context, p Projection, msg *message.Message, rec event.Recorded) (context.Context, trace.Span) {
	return pr.tracer.Start(tracing.Extract(ctx, msg.Metadata), "hearth.project",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("hearth.projection", p.Name), attribute.String("messaging.destination.name", p.Topic),
			attribute.String("messaging.message.id", msg.UUID), attribute.String("hearth.event_type", rec.Type),
			attribute.String("hearth.stream_id", rec.StreamID), attribute.Int("hearth.version", rec.Version)))
}

// permanentError fails without retries.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// cancelledError is a handler error seen after the message's context ended:
// the router is closing or the ack deadline passed. Such a message must not
// be poisoned: it is redelivered.
type cancelledError struct{ err error }

func (e *cancelledError) Error() string { return "cancelled: " + e.err.Error() }
func (e *cancelledError) Unwrap() error { return e.err }

func markCancelled(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err != nil && msg.Context().Err() != nil {
			return out, &cancelledError{err: err}
		}
		return out, err
	}
}

// SQLSubscribers returns a factory of watermill-sql subscribers on the
// event-store database. PollInterval is the fallback when no message is
// waiting.
func SQLSubscribers(db *sql.DB, log *slog.Logger, pollInterval time.Duration) func(string) (message.Subscriber, error) {
	wlog := watermill.NewSlogLogger(log.With("component", "subscriber"))
	deadline := AckDeadline
	return func(group string) (message.Subscriber, error) {
		return wsql.NewSubscriber(db, wsql.SubscriberConfig{
			ConsumerGroup:  group,
			AckDeadline:    &deadline,
			PollInterval:   pollInterval,
			ResendInterval: 200 * time.Millisecond,
			RetryInterval:  time.Second,
			SchemaAdapter:  pubsub.Schema,
			OffsetsAdapter: pubsub.Offsets,
		}, wlog)
	}
}

// SQLPublisher returns a publisher on db outside any transaction, for the
// poison queue.
func SQLPublisher(db *sql.DB, log *slog.Logger) (message.Publisher, error) {
	return wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: pubsub.Schema}, watermill.NewSlogLogger(log.With("component", "publisher")))
}
