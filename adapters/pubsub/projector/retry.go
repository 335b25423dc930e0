package projector

import (
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v4"
)

// Retry is the router's retry middleware: exponential backoff without
// jitter, so the budget is exactly what the fields say.
//
// Hearth does not use Watermill's middleware.Retry: in watermill v1.5.1 it
// calls NextBackOff once more to fill RetryParams whenever ShouldRetry is
// set, which advances the backoff twice per attempt (200 ms, 800 ms, 3.2 s
// ... instead of 200 ms, 400 ms, 800 ms ...). Permanent errors must skip the
// budget, so ShouldRetry is needed, so the schedule would be wrong.
type Retry struct {
	// InitialInterval is the first wait.
	InitialInterval time.Duration
	// Multiplier grows the wait after each retry. Must be set (0 would
	// mean a constant wait of InitialInterval).
	Multiplier float64
	// MaxInterval caps one wait.
	MaxInterval time.Duration
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries uint64
	// MaxElapsedTime bounds the whole budget, attempts included; 0 means no
	// bound.
	MaxElapsedTime time.Duration
	// Permanent reports errors that no retry can fix; they fail at once.
	// Optional.
	Permanent func(error) bool
	// OnRetry is called before each wait. Optional.
	OnRetry func(msg *message.Message, err error, wait time.Duration)
	// Clock is the time the budget runs on. Nil: real time. Tests pass a
	// fake that records each wait and returns at once, so that they check
	// the real schedule without waiting it out.
	Clock Clock
}

// Clock is what the retry budget reads the time from and waits on.
type Clock interface {
	Now() time.Time
	// Sleep returns after d (on a fake clock: at once, with the clock
	// moved on by d).
	Sleep(d time.Duration)
}

// clockTimer is a backoff.Timer on a Clock.
type clockTimer struct {
	clock Clock
	c     chan time.Time
}

func (t *clockTimer) Start(d time.Duration) {
	t.clock.Sleep(d)
	t.c = make(chan time.Time, 1)
	t.c <- t.clock.Now()
}

func (t *clockTimer) Stop()               {}
func (t *clockTimer) C() <-chan time.Time { return t.c }

// Middleware retries h until it succeeds, the budget runs out, the error is
// permanent, or the message's context ends.
func (r Retry) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		b := backoff.NewExponentialBackOff()
		b.InitialInterval, b.Multiplier, b.MaxInterval = r.InitialInterval, r.Multiplier, r.MaxInterval
		b.RandomizationFactor, b.MaxElapsedTime = 0, r.MaxElapsedTime
		var timer backoff.Timer // nil: a real timer
		if r.Clock != nil {
			b.Clock, timer = r.Clock, &clockTimer{clock: r.Clock}
		}
		budget := backoff.WithContext(backoff.WithMaxRetries(b, r.MaxRetries), msg.Context())
		return backoff.RetryNotifyWithTimerAndData(func() ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil && r.Permanent != nil && r.Permanent(err) {
				return out, backoff.Permanent(err)
			}
			return out, err
		}, budget, func(err error, wait time.Duration) {
			if r.OnRetry != nil {
				r.OnRetry(msg, err, wait)
			}
		}, timer)
	}
}

func (pr *Projector) logRetry() func(*message.Message, error, time.Duration) {
	log, m := pr.log.With("component", "router"), pr.metrics
	return func(msg *message.Message, err error, wait time.Duration) {
		m.retry(message.HandlerNameFromCtx(msg.Context()))
		log.Warn("projection failed, retrying", "message_uuid", msg.UUID, "wait", wait, "error", err)
	}
}

func isPermanent(err error) bool { return errors.As(err, new(*permanentError)) }
