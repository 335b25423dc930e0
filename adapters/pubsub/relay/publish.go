package relay

import (
	"context"
	"fmt"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"hearth/internal/tracing"
)

// marshaler is watermill-nats's NATS marshaler, which its publisher used
// before the relay sent messages itself: the stream's messages keep its
// headers (the metadata, and the UUID as _watermill_message_uuid).
var marshaler = &wmnats.NATSMarshaler{}

// page is one page of a topic on its way to JetStream. Its publish, retried
// by Relay.retry, carries on from the first message not acknowledged yet.
type page struct {
	r      *Relay
	ctx    context.Context
	js     nats.JetStreamContext
	topic  string
	rows   []wsql.Row
	msgs   []*message.Message
	spans  []trace.Span // from a message's first send to its acknowledgement
	acked  int          // msgs[:acked] are acknowledged, in page order
	window int
}

func (r *Relay) newPage(ctx context.Context, js nats.JetStreamContext, topic string, rows []wsql.Row, msgs []*message.Message) *page {
	return &page{r: r, ctx: ctx, js: js, topic: topic, rows: rows, msgs: msgs,
		spans: make([]trace.Span, len(msgs)), window: r.cfg.Window}
}

// publish sends msgs[acked:] in page order without waiting for each
// acknowledgement, with two limits: at most window messages await theirs,
// and a message is sent only once the previous message of its aggregate
// (in this page) is acknowledged. It returns nil once every message is
// acknowledged (stored, or a duplicate of a stored one); otherwise the
// error of the first message that was not, where the next call starts
// again, after every message it sent has its answer or timed out.
func (p *page) publish() error {
	from := p.acked
	futures := make([]nats.PubAckFuture, len(p.msgs)) // of msgs[from:sent]
	sent := from
	var failed error
	// await waits for the acknowledgements of msgs[acked:through+1], in
	// order, and reports whether they all came.
	await := func(through int) bool {
		for ; p.acked <= through; p.acked++ {
			if failed = p.ack(futures[p.acked]); failed != nil {
				failed = fmt.Errorf("publish %s to %s: %w", p.msgs[p.acked].UUID, p.r.subject(p.msgs[p.acked]), failed)
				return false
			}
			tracing.End(p.spans[p.acked], nil)
			p.spans[p.acked] = nil
			p.r.cfg.Metrics.published(p.topic)
		}
		return true
	}
	last := map[string]int{} // an aggregate's last message sent by this call
	for i := from; i < len(p.msgs) && failed == nil; i++ {
		// Its aggregate's previous message must be stored first: then, however
		// JetStream loses or refuses a message, no later message of that
		// aggregate can be stored before it (the package's Guarantees).
		agg := p.msgs[i].Metadata.Get("aggregate_id")
		if j, ok := last[agg]; ok && j >= p.acked && !await(j) {
			break
		}
		if i-p.acked >= p.window && !await(i-p.window) {
			break
		}
		m, err := p.message(i)
		if err == nil {
			// As watermill-nats's publisher with TrackMsgId: Nats-Msg-Id is
			// the Watermill UUID, the event id.
			futures[i], err = p.js.PublishMsgAsync(m, nats.MsgId(m.Header.Get(wmnats.WatermillUUIDHdr)))
		}
		if err != nil {
			if await(i - 1) { // what went before answers first: the first failure is the one reported
				failed = fmt.Errorf("publish %s to %s: %w", p.msgs[i].UUID, p.r.subject(p.msgs[i]), err)
			}
			break
		}
		sent, last[agg] = i+1, i
	}
	if failed == nil && await(sent-1) {
		return nil
	}
	// The messages after the failure may still be answered; the next call
	// sends them again (JetStream drops those it stored, by Nats-Msg-Id),
	// once none of this call's is pending.
	for i := p.acked + 1; i < sent; i++ { // msgs[acked]'s answer is in failed, or it was not sent
		_ = p.ack(futures[i])
	}
	return failed
}

// message is msgs[i] as watermill-nats's publisher marshals it; its span
// starts with its first send, and its traceparent is that span's.
func (p *page) message(i int) (*nats.Msg, error) {
	msg := p.msgs[i]
	subject := p.r.subject(msg)
	if p.spans[i] == nil {
		p.spans[i] = p.r.startPublish(p.ctx, p.rows[i].Msg, msg, subject)
	}
	m, err := marshaler.Marshal(subject, msg)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", msg.UUID, err)
	}
	return m, nil
}

// ack waits for the answer to f: nil for an acknowledgement, else the
// error (JetStream's refusal, the connection lost, no answer within
// publishTimeout, or the term's end).
func (p *page) ack(f nats.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// end ends the spans still open, with err: those of messages never
// acknowledged because the term ended.
func (p *page) end(err error) {
	for i, span := range p.spans {
		if span != nil {
			tracing.End(span, err)
			p.spans[i] = nil
		}
	}
}
