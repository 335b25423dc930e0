// Package relay publishes every event of the event store to a NATS
// JetStream stream, for other services to consume.
//
// # What it publishes
//
// Each message of an aggregate type's Watermill topic (internal/aggregates)
// becomes one JetStream message, as Watermill's NATS Pub/Sub
// (watermill-nats, JetStream mode, TrackMsgId) would publish it:
//
//   - payload the event's public form (app/publicevent: the JSON the event
//     feed and webhooks carry, with its store position);
//   - subject SubjectPrefix.<merchant_id>.<public type>, e.g.
//     hearth.5f0c...e1.order.created (the type's dot makes aggregate and
//     change two tokens: hearth.<merchant_id>.order.> is one merchant's
//     order events);
//   - headers type, merchant_id, aggregate_type, aggregate_id,
//     aggregate_version, schema_version, and Nats-Msg-Id = the event id,
//     so JetStream drops a message it already holds within the stream's
//     duplicate window; with tracing on, traceparent too (the publish's
//     span, in the trace of the write).
//
// # How
//
// One leader relays (its own advisory lock, advisory.Relay, and fencing
// term): Run is the body of one leadership term. Per topic, it reads a page
// of messages after its position with watermill-sql's own query (the same
// order, transaction id then offset, and the same pg_snapshot_xmin rule as
// every subscriber), turns them into public events and publishes them
// through JetStream's asynchronous publish on the term's one connection, in
// page order, each marshaled as watermill-nats's publisher does
// (NATSMarshaler, Nats-Msg-Id as with TrackMsgId). Up to Window messages
// await their acknowledgement at once, and a message is sent only once the
// previous message of its aggregate is acknowledged (Guarantees). Once
// JetStream has acknowledged the whole page, the relay records its last
// position in the read model (readmodel.RelayOffsets) in a transaction fenced by the
// term. It waits as the projections' subscribers do (projector.Repoll): it
// wakes on the topic tables' NOTIFY (projector.Notifier), re-reads soon
// after one whose message was not visible yet, and polls every Fallback
// otherwise.
//
// # Guarantees
//
//   - At least once: a position is recorded only after JetStream has
//     acknowledged every message up to it, so a crash, a lost leadership or
//     a NATS outage makes the next attempt publish again from the recorded
//     position; failed reads, publishes and saves are retried (100 ms
//     doubling to 5 s) for as long as the term lasts.
//   - In order per aggregate: an aggregate's events are in one topic, in
//     commit order, and the relay sends an aggregate's next message only
//     once its previous one is acknowledged (stored, or found to be a
//     duplicate of a stored one). Messages of different aggregates are sent
//     without waiting: on one connection they reach the server in the
//     order sent, and the stream stores them in that order, so normally the
//     stream holds a page in page order. But JetStream may store a message
//     sent after one it lost or refused: a replicated stream whose leader
//     changes drops what reached the old one (no answer; the client times
//     out) and stores what reaches the new one; with DiscardNew, a message
//     over MaxBytes or a subject's MaxMsgsPerSubject is refused while a
//     smaller one, or one of another subject, is stored; a message over
//     MaxMsgSize is refused alone; a connection lost and restored while a
//     page is being sent loses the old connection's unsent tail while what
//     follows goes on the new one. The page is then published again from
//     the first message not acknowledged, so the stream may hold that
//     message after later messages of other aggregates, never after a later
//     message of its own. When two leaders overlap (an old one still
//     finishing a page), both publish each aggregate in that order and
//     JetStream keeps the first copy of each, so the stream still holds
//     each aggregate's events in order.
//   - Deduplicated by JetStream: republished messages carry the same
//     Nats-Msg-Id and are dropped within the stream's duplicate window
//     (Config.DuplicateWindow). A republish comes after a crash or a lost
//     term, for at most the page in flight; only a relay stopped for longer
//     than the window between a publish and its save can put a duplicate
//     into the stream, which consumers recognise by the event id (or
//     aggregate_id and aggregate_version).
//   - No gap skipped: the position is in each topic's offsets table (group
//     ConsumerGroup) from the start of a term, so retention keeps what the
//     relay has not published; were some deleted all the same (a relay
//     started after, its row deleted), each read's gap check
//     (pubsub.CheckGap) ends the term with a *pubsub.TopicGapError instead.
//   - Fenced: the position is written only under the relay's current term
//     (hearth_fence); a relay whose term is over gets readmodel.ErrStaleTerm
//     and Run returns it.
//   - One stream: each position is recorded with the stream and subject
//     prefix it was published to (readmodel.RelayTarget). Workers deployed
//     from different manifests may disagree on them, and leadership moves
//     the relay between workers: a term whose own target is not the
//     recorded one ends at once with a *TargetError, before it connects to
//     NATS, rather than put what follows the position into a stream the
//     first one's consumers never read. The leader package then rests the
//     unit on that worker, so a worker whose target is the recorded one
//     takes it.
package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/publicevent"
	"hearth/domain/event"
	"hearth/internal/aggregates"
	"hearth/internal/database"
	"hearth/internal/tracing"
)

const (
	// ApplicationName names the relay's event-store sessions and its NATS
	// connection. The next leader ends such sessions (leader.Config.FenceAppName).
	ApplicationName = "hearth-relay"
	// ConsumerGroup is the group under which the relay's position is copied
	// into the topics' Watermill offsets tables (see mirror).
	ConsumerGroup = "relay"
	// PageSize is how many messages the relay reads, publishes and then
	// records at a time: at most that many are published again after a crash
	// (and dropped as duplicates). It is the catch-up's, so that the relay
	// shares the pages of a backlog with the projections (projector.Pages).
	PageSize = projector.CatchUpPageSize
	// Window is how many messages of a topic may await JetStream's
	// acknowledgement at once (see page.publish): enough to keep the
	// connection busy (a larger one bought nothing in the relay's
	// benchmark); a message also waits for its aggregate's previous one.
	Window = 256
	// publishTimeout bounds the wait for JetStream's acknowledgement of one
	// message, from its send; the page is then published again from that
	// message, with the same Nats-Msg-Ids.
	publishTimeout = 5 * time.Second
	// offsetsTimeout bounds each load and save of the relay's position
	// (a row of the read model's), which is then tried again. The read
	// model may be a server of its own, which the relay's leadership does
	// not watch (its lock is the event store's): one gone silent (its
	// machine paused, its kernel still acknowledging) would otherwise hold
	// the call, and the term with it, for as long as it stays so.
	offsetsTimeout = 10 * time.Second
)

// Config is what New needs.
type Config struct {
	// EventStore is the event store's URL. Each term opens a small pool of
	// its own on it (application_name ApplicationName), and a LISTEN
	// connection unless Notifier is set. Required.
	EventStore string
	// Notifier is the process's notifier, shared with the projections, the
	// event feed and webhook delivery, and run by its owner. Optional: when
	// nil, each term opens and runs one of its own.
	Notifier *projector.Notifier
	// Offsets is where the relay's position is kept, fenced by its term.
	// Required.
	Offsets *readmodel.RelayOffsets
	// Lock names the relay's leadership lock: its term row in
	// projection_leader fences Offsets. Required.
	Lock string
	// Lease is the lock's server-side lease (leader.Elector.Lease): the
	// idle_in_transaction_session_timeout of the fenced transactions.
	// Required.
	Lease time.Duration
	// NATSURL is the NATS server (comma-separated URLs for a cluster).
	// Required.
	NATSURL string
	// Stream is the JetStream stream's name; Run creates the stream when it
	// is missing. Required: its one default is the configuration's
	// (cmd/app Config.RelayStream).
	Stream string
	// SubjectPrefix begins every subject: Prefix.<merchant_id>.<public type>;
	// the stream takes Prefix.>. Required (cmd/app Config.RelaySubjectPrefix).
	SubjectPrefix string
	// DuplicateWindow is the stream's duplicate window: how long JetStream
	// remembers a Nats-Msg-Id. Required (cmd/app Config.RelayDuplicateWindow).
	DuplicateWindow time.Duration
	// Fallback is how often an idle topic is read when no notification
	// comes. Required (cmd/app Config.PollInterval).
	Fallback time.Duration
	// Timer starts the waits between reads (projector.Repoll). Nil: real
	// time; tests pass timers that they fire.
	Timer projector.Timer
	// PageSize defaults to PageSize.
	PageSize int
	// Pages, when set, is the process's page cache, shared with the
	// catch-ups of the projections (projector.Pages). Optional.
	Pages *projector.Pages
	// Window defaults to Window; 1 publishes one message at a time, each
	// after the previous one's acknowledgement.
	Window int
	// Metrics counts what is published. Optional.
	Metrics *Metrics
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Tracer gives each publish a span, child of the span that published
	// the event's topic message (its metadata's trace context), whose
	// context the JetStream message then carries (header traceparent).
	// Optional: without it, no span and no such header.
	Tracer trace.Tracer
}

// TargetError is why a term refuses to relay: the positions were recorded for another stream or subject prefix than this
// worker's RELAY_STREAM and RELAY_SUBJECT_PREFIX.
type TargetError struct {
	Own      readmodel.RelayTarget
	Recorded []readmodel.RelayTarget
}

func (e *TargetError) Error() string {
	recorded := make([]string, len(e.Recorded))
	for i, t := range e.Recorded {
		recorded[i] = fmt.Sprintf("stream %s, subjects %s.>", t.Stream, t.SubjectPrefix)
	}
	return fmt.Sprintf("relay target: this worker relays to stream %s (RELAY_STREAM), subjects %s.> (RELAY_SUBJECT_PREFIX), "+
		"but the relay's position (relay_offsets) was recorded for %s: every worker must have the same RELAY_STREAM and "+
		"RELAY_SUBJECT_PREFIX, and this one does not relay until it does (operations.md, Relay to NATS JetStream)",
		e.Own.Stream, e.Own.SubjectPrefix, strings.Join(recorded, " and "))
}

// Relay publishes the event store's topics to JetStream. Run is one
// leadership term.
type Relay struct {
	cfg Config
	log *slog.Logger
	// streamMu keeps the topics' calls of ensureStream one at a time.
	streamMu sync.Mutex
}

// New validates cfg and returns the relay it describes.
func New(cfg Config) (*Relay, error) {
	var errs []error
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"EventStore", cfg.EventStore != ""}, {"Offsets", cfg.Offsets != nil}, {"Lock", cfg.Lock != ""},
		{"Lease", cfg.Lease > 0}, {"NATSURL", cfg.NATSURL != ""}, {"Stream", cfg.Stream != ""},
		{"SubjectPrefix", cfg.SubjectPrefix != ""}, {"DuplicateWindow", cfg.DuplicateWindow > 0},
		{"Fallback", cfg.Fallback > 0},
	} {
		if !f.ok {
			errs = append(errs, fmt.Errorf("relay.New: Config.%s is required", f.name))
		}
	}
	if cfg.Window < 0 {
		errs = append(errs, fmt.Errorf("relay.New: Config.Window is %d: it must be positive, or 0 for the default", cfg.Window))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.PageSize = cmp.Or(cfg.PageSize, PageSize)
	cfg.Window = cmp.Or(cfg.Window, Window)
	return &Relay{cfg: cfg, log: cmp.Or(cfg.Log, slog.Default()).With("component", "relay")}, nil
}

// Topics are the topics it relays: every aggregate type's, and the data
// subjects' (customer.erased, staff_member.erased).
func Topics() []string {
	var out []string
	for _, a := range aggregates.Outbound() {
		out = append(out, a.Topic)
	}
	return out
}

// Run relays for one leadership term, until ctx ends (it then returns nil)
// or a position write finds term stale (it returns readmodel.ErrStaleTerm).
// NATS being unreachable is not an error: the relay waits for it.
func (r *Relay) Run(ctx context.Context, term int64) error {
	ctx = readmodel.WithFence(ctx, readmodel.Fence{Lock: r.cfg.Lock, Term: term, Lease: r.cfg.Lease})
	log := r.log.With("term", term)
	// Before anything reaches NATS: a worker of another target would
	// create its stream and publish there.
	if err := r.retry(ctx, log, "load", func() error { return r.checkTarget(ctx) }); err != nil {
		return r.ended(ctx, err)
	}
	es, err := database.OpenSQL(ctx, r.cfg.EventStore, len(aggregates.Outbound())+1, ApplicationName)
	if err != nil {
		return fmt.Errorf("open relay pool: %w", err)
	}
	defer es.Close()
	nc, err := r.connect(log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.MaxWait(publishTimeout))
	if err != nil {
		return fmt.Errorf("relay: jetstream: %w", err)
	}
	if err := r.retry(ctx, log, "stream", func() error { return r.ensureStream(js, log) }); err != nil {
		return r.ended(ctx, err)
	}
	notifier, own := r.cfg.Notifier, r.cfg.Notifier == nil
	if own {
		if notifier, err = projector.NewNotifier(r.cfg.EventStore, log); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	if own {
		g.Go(func() error { return notifier.Run(gctx) })
	}
	for _, a := range aggregates.Outbound() {
		g.Go(func() error { return r.relay(gctx, es, nc, notifier, a, log.With("topic", a.Topic)) })
	}
	return r.ended(ctx, g.Wait())
}

// target is where this relay publishes.
func (r *Relay) target() readmodel.RelayTarget {
	return readmodel.RelayTarget{Stream: r.cfg.Stream, SubjectPrefix: r.cfg.SubjectPrefix}
}

// checkTarget fails with a *TargetError when a position was recorded for
// another target than this relay's.
func (r *Relay) checkTarget(ctx context.Context) error {
	loadCtx, cancel := context.WithTimeout(ctx, offsetsTimeout)
	defer cancel()
	recorded, err := r.cfg.Offsets.Targets(loadCtx)
	if err != nil {
		return err
	}
	for _, t := range recorded {
		if t != r.target() {
			r.cfg.Metrics.failed("target")
			return &TargetError{Own: r.target(), Recorded: recorded}
		}
	}
	return nil
}

// ended is what Run returns for err: the stale term, or nothing once the
// term is over (errors of parts cut short are not errors).
func (r *Relay) ended(ctx context.Context, err error) error {
	if errors.Is(err, readmodel.ErrStaleTerm) || ctx.Err() == nil {
		return err
	}
	return nil
}

// connect opens the NATS connection of a term. It returns at once even when
// the server is unreachable and keeps reconnecting; while it is
// disconnected a publish fails at once (no reconnect buffer) and is retried.
func (r *Relay) connect(log *slog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(r.cfg.NATSURL,
		nats.Name(ApplicationName),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS connection lost; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS connection restored", "url", serverOf(nc)) }),
	)
	if err != nil {
		return nil, fmt.Errorf("relay: connect to NATS: %w", err)
	}
	return nc, nil
}

// serverOf is the URL of the server nc is connected to, without its
// userinfo: a password, or a token, which NATS takes from a URL's user
// when it has no password (nats://TOKEN@host), and which
// ConnectedUrlRedacted (url.URL.Redacted) leaves as it is.
func serverOf(nc *nats.Conn) string {
	u, err := url.Parse(nc.ConnectedUrl())
	if err != nil {
		return ""
	}
	u.User = nil
	return u.String()
}

// ensureStream creates the stream when it is missing, with the subjects
// SubjectPrefix.>, file storage, limits retention (nothing expires unless
// the operator sets limits) and the duplicate window. An existing stream
// keeps its settings (an operator's limits, replicas), except that its
// duplicate window is set to DuplicateWindow; it must take our subjects.
func (r *Relay) ensureStream(js nats.JetStreamManager, log *slog.Logger) error {
	r.streamMu.Lock()
	defer r.streamMu.Unlock()
	info, err := js.StreamInfo(r.cfg.Stream)
	if errors.Is(err, nats.ErrStreamNotFound) {
		_, err = js.AddStream(&nats.StreamConfig{
			Name:        r.cfg.Stream,
			Description: "Hearth's events: subject " + r.cfg.SubjectPrefix + ".<merchant_id>.<type>, public events (schema_version 1), Nats-Msg-Id = event id",
			Subjects:    []string{r.cfg.SubjectPrefix + ".>"},
			Storage:     nats.FileStorage,
			Retention:   nats.LimitsPolicy,
			Discard:     nats.DiscardOld,
			Duplicates:  r.cfg.DuplicateWindow,
		})
		if err != nil {
			return r.createError(js, err)
		}
		log.Info("created JetStream stream", "stream", r.cfg.Stream, "subjects", r.cfg.SubjectPrefix+".>", "duplicate_window", r.cfg.DuplicateWindow)
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", r.cfg.Stream, err)
	}
	sample := r.cfg.SubjectPrefix + ".merchant.aggregate.change"
	if !anyMatches(info.Config.Subjects, sample) {
		return fmt.Errorf("stream %s takes subjects %v, not %s.>: give it that subject or set RELAY_STREAM to another stream",
			r.cfg.Stream, info.Config.Subjects, r.cfg.SubjectPrefix)
	}
	window := r.cfg.DuplicateWindow
	if age := info.Config.MaxAge; age > 0 && age < window {
		// JetStream refuses a window longer than the stream keeps its
		// messages; a duplicate of a message already gone could not be
		// found in it anyway.
		log.Warn("the stream keeps its messages less long than the duplicate window; the window is its max age",
			"stream", r.cfg.Stream, "max_age", age, "duplicate_window", window)
		window = age
	}
	if info.Config.Duplicates != window {
		cfg := info.Config
		cfg.Duplicates = window
		if _, err := js.UpdateStream(&cfg); err != nil {
			return fmt.Errorf("set the duplicate window of stream %s: %w", r.cfg.Stream, err)
		}
		log.Info("set the stream's duplicate window", "stream", r.cfg.Stream, "from", info.Config.Duplicates, "to", window)
	}
	return nil
}

// jsStreamSubjectOverlap is JetStream's error code for a stream whose
// subjects another stream already takes (nats.go names no error for it).
const jsStreamSubjectOverlap nats.ErrorCode = 10065

// createError is the failure to create the stream. JetStream gives a
// subject to one stream only, and says only that the subjects overlap:
// after RELAY_STREAM was changed (publishing everything into a new stream)
// the old stream still takes them, and the relay would retry for ever, so
// the error names that stream and the ways out.
func (r *Relay) createError(js nats.JetStreamManager, err error) error {
	var apiErr *nats.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsStreamSubjectOverlap {
		return fmt.Errorf("create stream %s: %w", r.cfg.Stream, err)
	}
	holder, lookup := js.StreamNameBySubject(r.cfg.SubjectPrefix + ".>")
	if lookup != nil {
		holder = "(not found: " + lookup.Error() + ")"
	}
	return fmt.Errorf("create stream %s: its subjects are taken by stream %s: delete that stream (nats stream rm %s), "+
		"set RELAY_STREAM to it, or set another RELAY_SUBJECT_PREFIX: %w", r.cfg.Stream, holder, holder, err)
}

// streamGone reports whether a publish failed for want of the stream:
// nothing listens on its subjects (JetStream answers no one), or the
// stream is not found.
func streamGone(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrNoStreamResponse) || errors.Is(err, nats.ErrStreamNotFound)
}

// anyMatches reports whether one of the subject filters takes subject.
func anyMatches(filters []string, subject string) bool {
	for _, f := range filters {
		if matches(strings.Split(f, "."), strings.Split(subject, ".")) {
			return true
		}
	}
	return false
}

func matches(filter, subject []string) bool {
	for i, tok := range filter {
		switch {
		case tok == ">":
			return i < len(subject)
		case i >= len(subject):
			return false
		case tok != "*" && tok != subject[i]:
			return false
		}
	}
	return len(filter) == len(subject)
}

// relay relays the topic of an aggregate type until ctx ends or its term
// is found stale.
func (r *Relay) relay(ctx context.Context, es *sql.DB, nc *nats.Conn, n *projector.Notifier, agg aggregates.Facts, log *slog.Logger) error {
	topic := agg.Topic
	// A context of the topic's own: its pending acknowledgements (at most
	// Window) are its alone, and one that does not come within
	// publishTimeout fails its future.
	js, err := nc.JetStream(nats.PublishAsyncTimeout(publishTimeout), nats.PublishAsyncMaxPending(r.cfg.Window))
	if err != nil {
		return fmt.Errorf("relay: jetstream for %s: %w", topic, err)
	}
	var pos readmodel.RelayPosition
	// The position goes into the topic's offsets table before the first
	// read, so that retention keeps what the relay has not published from
	// then on; whatever it deleted before, the reads' gap check finds.
	err = r.retry(ctx, log, "load", func() (err error) {
		loadCtx, cancel := context.WithTimeout(ctx, offsetsTimeout)
		pos, err = r.cfg.Offsets.Load(loadCtx, topic)
		cancel()
		if err != nil {
			return err
		}
		return r.register(ctx, es, topic, pos)
	})
	if err != nil {
		return err
	}
	log.Debug("relaying", "transaction_id", pos.TransactionID, "offset", pos.Offset)
	defer r.cfg.Pages.Join(topic, ConsumerGroup)()
	// The subscribers' waits: a notification, capped quick re-reads while
	// its message is not visible yet, or the fallback.
	wait := projector.NewRepoll(n, topic, r.cfg.Fallback, r.cfg.Timer)
	for {
		var rows []wsql.Row
		err := r.retry(ctx, log, "read", func() (err error) {
			rows, err = projector.ReadAfter(ctx, es, r.cfg.Pages, topic, ConsumerGroup,
				pubsub.Position{TransactionID: uint64(pos.TransactionID), Offset: pos.Offset}, r.cfg.PageSize)
			return err
		})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			if !wait.Wait(ctx.Done()) {
				return nil
			}
			continue
		}
		wait.Found(false) // the relay's reads do not tell hidden messages
		var msgs []*message.Message
		err = r.retry(ctx, log, "encode", func() (err error) {
			msgs, err = r.public(ctx, es, agg, rows)
			return err
		})
		if err != nil {
			return err
		}
		p := r.newPage(ctx, js, topic, rows, msgs)
		err = r.retry(ctx, log, "publish", func() error {
			err := p.publish()
			if streamGone(err) {
				// Deleted during the term, or a server back on an empty
				// store: created again, as at a term's start, before the
				// page is sent again.
				if serr := r.ensureStream(js, log); serr != nil {
					return errors.Join(err, serr)
				}
				log.Warn("the stream was missing during the term; it is there again (its consumers' positions went with the old one)", "stream", r.cfg.Stream)
			}
			return err
		})
		p.end(err)
		if err != nil {
			return err
		}
		last := rows[len(rows)-1]
		txid, _ := last.ExtraData["transaction_id"].(int64)
		pos = readmodel.RelayPosition{TransactionID: txid, Offset: last.Offset}
		err = r.retry(ctx, log, "save", func() error {
			saveCtx, cancel := context.WithTimeout(ctx, offsetsTimeout)
			defer cancel()
			return r.cfg.Offsets.Save(saveCtx, topic, pos, r.target())
		})
		if err != nil {
			return err
		}
		r.mirror(ctx, es, topic, pos, log)
	}
}

// startPublish starts the span of msg's publish to subject, when the relay
// has a tracer: a child of the span that published from, whose context msg
// then carries to JetStream's consumers.
func (r *Relay) startPublish(ctx context.Context, from, msg *message.Message, subject string) trace.Span {
	if r.cfg.Tracer == nil {
		return noop.Span{}
	}
	ctx, span := r.cfg.Tracer.Start(tracing.Extract(ctx, from.Metadata), "hearth.relay.publish",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.message.id", msg.UUID)))
	tracing.Inject(ctx, msg.Metadata)
	return span
}

// public turns a page of agg's topic into the messages to publish: each
// event in its public form (publicevent), with its store position, which
// the topic message does not carry (one query for the page). An event an
// operator skipped in agg's projection (app parked skip) goes out as the
// event feed shows it, <aggregate>.event_skipped, as the read models
// applied it. Any other event without a public form (a payload that does
// not decode) is an error: the relay holds the topic there, retrying and
// counting, until the operator skips it.
func (r *Relay) public(ctx context.Context, es *sql.DB, agg aggregates.Facts, rows []wsql.Row) ([]*message.Message, error) {
	recs := make([]event.Recorded, len(rows))
	undecodable := make([]error, len(rows))
	ids := make([]string, len(rows))
	for i, row := range rows {
		rec, err := event.Unmarshal(row.Msg.Payload, agg.Decode)
		if err != nil {
			// Its envelope may still be read: the event may have been skipped.
			undecodable[i] = fmt.Errorf("message %s of %s: %w", row.Msg.UUID, agg.Topic, err)
			if rec, err = event.Unmarshal(row.Msg.Payload, envelopeOnly); err != nil {
				return nil, undecodable[i]
			}
		}
		recs[i], ids[i] = rec, rec.ID
	}
	stored, err := storedEvents(ctx, es, agg.Projection, ids)
	if err != nil {
		return nil, err
	}
	msgs := make([]*message.Message, len(recs))
	for i, rec := range recs {
		st, ok := stored[rec.ID]
		switch {
		case !ok:
			return nil, fmt.Errorf("event %s of %s is not in the events table", rec.ID, agg.Topic)
		case st.skipped:
			rec = event.Skip(rec)
		case undecodable[i] != nil:
			return nil, undecodable[i]
		}
		pe, err := publicevent.From(publicevent.Stored{Recorded: rec, Position: st.position})
		if err != nil {
			return nil, err
		}
		// The stream keeps what it is given, and Hearth cannot erase a
		// message's bytes there: it never gets personal data.
		pe = publicevent.WithoutPersonalData(pe)
		payload, err := json.Marshal(pe)
		if err != nil {
			return nil, fmt.Errorf("encode event %s: %w", pe.ID, err)
		}
		msg := message.NewMessage(pe.ID, payload) // its UUID becomes Nats-Msg-Id
		msg.Metadata = message.Metadata{
			"type": pe.Type, "merchant_id": pe.MerchantID, "aggregate_type": pe.AggregateType,
			"aggregate_id": pe.AggregateID, "aggregate_version": strconv.Itoa(pe.AggregateVersion),
			"schema_version": strconv.Itoa(pe.SchemaVersion),
		}
		msgs[i] = msg
	}
	return msgs, nil
}

// envelopeOnly decodes no event: with it event.Unmarshal reads the
// envelope alone.
func envelopeOnly(string, []byte, ...[]byte) (event.Event, error) { return nil, nil }

// stored is what the events table says of an event the relay publishes.
type stored struct {
	position int64
	skipped  bool // in projection, by an operator
}

// storedEvents reads the store positions of the events ids, and which of
// them were skipped in projection.
func storedEvents(ctx context.Context, es *sql.DB, projection string, ids []string) (map[string]stored, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := es.QueryContext(ctx, `SELECT e.event_id::text, e.position,
			EXISTS (SELECT 1 FROM skipped_events s WHERE s.projection = $2 AND s.event_id = e.event_id)
		FROM events e WHERE e.event_id = ANY($1::text[]::uuid[])`, ids, projection)
	if err != nil {
		return nil, fmt.Errorf("read event positions: %w", err)
	}
	defer rows.Close()
	out := make(map[string]stored, len(ids))
	for rows.Next() {
		var id string
		var st stored
		if err := rows.Scan(&id, &st.position, &st.skipped); err != nil {
			return nil, fmt.Errorf("read event positions: %w", err)
		}
		out[id] = st
	}
	return out, rows.Err()
}

// subject is the message's subject: SubjectPrefix.<merchant_id>.<public
// type>, the type's aggregate and change as two tokens.
func (r *Relay) subject(msg *message.Message) string {
	agg, change, _ := strings.Cut(msg.Metadata.Get("type"), ".")
	return r.cfg.SubjectPrefix + "." + token(msg.Metadata.Get("merchant_id")) + "." + token(agg) + "." + token(change)
}

// token makes s one subject token: NATS splits subjects at dots and gives
// '*', '>' and white space meaning. Merchant ids (UUIDs) and the halves of
// public types (snake_case words) contain none of them; were one to, it is
// replaced, rather than the event held back.
func token(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(c rune) rune {
		if c == '.' || c == '*' || c == '>' || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return '_'
		}
		return c
	}, s)
}

// mirror copies pos into the topic's Watermill offsets table, as consumer
// group ConsumerGroup, once it is recorded: whatever reads those tables
// (retention, which keeps what a group still needs, lag queries) then sees
// the relay too. The copy is never read by the relay and may lag behind
// its position; a failure is logged and the next page writes it again.
func (r *Relay) mirror(ctx context.Context, es *sql.DB, topic string, pos readmodel.RelayPosition, log *slog.Logger) {
	if err := r.register(ctx, es, topic, pos); err != nil && ctx.Err() == nil {
		log.Warn("could not copy the relay's position to the topic's offsets table", "err", err)
	}
}

// register writes pos into the topic's offsets table as ConsumerGroup's.
func (r *Relay) register(ctx context.Context, es *sql.DB, topic string, pos readmodel.RelayPosition) error {
	row := wsql.Row{Offset: pos.Offset, ExtraData: map[string]any{"transaction_id": pos.TransactionID}}
	q := pubsub.Offsets.AckMessageQuery(topic, row, ConsumerGroup)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := es.ExecContext(ctx, q.Query, q.Args...); err != nil {
		return fmt.Errorf("copy the relay's position to the offsets table of %s: %w", topic, err)
	}
	return nil
}

// retry runs op (named by what: stream, load, read, encode, publish or save) until
// it succeeds, ctx ends (it returns ctx's error) or op fails with
// readmodel.ErrStaleTerm, a *pubsub.TopicGapError or a *TargetError (it
// returns that: the term ends there, and the next one meets the gap or the
// other target again until the operator deals with it), waiting 100 ms doubling to 5 s
// between attempts. The first failure of a streak is
// logged at Warn, the rest at Debug, the recovery at Info.
func (r *Relay) retry(ctx context.Context, log *slog.Logger, what string, op func() error) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	bo.Reset()
	failures, since := 0, time.Time{}
	for {
		err := op()
		switch {
		case err == nil:
			if failures > 0 {
				log.Info("relay recovered", "op", what, "failures", failures, "after", time.Since(since).Round(time.Millisecond))
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, readmodel.ErrStaleTerm), errors.As(err, new(*pubsub.TopicGapError)), errors.As(err, new(*TargetError)):
			return err
		}
		failures++
		r.cfg.Metrics.failed(what)
		if failures == 1 {
			since = time.Now()
			log.Warn("relay operation failed; retrying", "op", what, "err", err)
		} else {
			log.Debug("relay operation still failing", "op", what, "err", err, "failures", failures)
		}
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
