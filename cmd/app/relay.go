package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"hearth/adapters/pubsub/relay"
	"hearth/adapters/readmodel"
	"hearth/internal/advisory"
	"hearth/leader"
)

// newRelay builds the relay to NATS JetStream (RELAY_NATS_URL) as a
// leadership unit (its own lock, advisory.Relay, and fencing term, shared out
// by the Scheduler like the projections) and registers its metrics; nil
// when RELAY_NATS_URL is unset or the mode runs no background work (api).
// It shares the process's notifier when there is one (mode all).
func newRelay(cfg Config, dbs databases, w wiring, log *slog.Logger) (*leader.Unit, error) {
	if cfg.RelayNATSURL == "" || cfg.Mode == ModeAPI {
		return nil, nil
	}
	offsets, err := readmodel.NewRelayOffsets(dbs.rm)
	if err != nil {
		return nil, err
	}
	metrics, err := relay.NewMetrics(w.telemetry.reg)
	if err != nil {
		return nil, err
	}
	r, err := relay.New(relay.Config{
		EventStore: cfg.DatabaseURL, Notifier: w.notifier, Offsets: offsets, Lock: advisory.Relay, Lease: leader.DefaultLease,
		NATSURL: cfg.RelayNATSURL, Stream: cfg.RelayStream, SubjectPrefix: cfg.RelaySubjectPrefix,
		DuplicateWindow: cfg.RelayDuplicateWindow, Fallback: cfg.PollInterval, Metrics: metrics, Log: log, Tracer: w.tracer,
		Pages: w.pages,
	})
	if err != nil {
		return nil, err
	}
	if err := w.telemetry.reg.Register(shared(relay.NewLagCollector(dbs.es.DB, offsets, relay.Topics(), log))); err != nil {
		return nil, err
	}
	// A new leader ends the sessions an earlier one left (its pool).
	return &leader.Unit{Name: advisory.Relay, FenceAppName: relay.ApplicationName, Lead: r.Run}, nil
}

// checkRelay validates the relay's settings; it names each bad one.
func (c Config) checkRelay() []error {
	var errs []error
	for item := range strings.SplitSeq(c.RelayNATSURL, ",") {
		if c.RelayNATSURL == "" {
			break
		}
		u, err := url.Parse(strings.TrimSpace(item))
		if err == nil && u.Port() != "" {
			if p, perr := strconv.Atoi(u.Port()); perr != nil || p < 1 || p > 65535 {
				// A port no server can have: the relay would retry it for ever.
				errs = append(errs, errors.New("RELAY_NATS_URL: a port must be a number from 1 to 65535"))
				break
			}
		}
		if err != nil || u.Host == "" || !map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}[u.Scheme] {
			// The URL itself is not repeated: it may hold a password.
			errs = append(errs, errors.New("RELAY_NATS_URL: each comma-separated item must be a NATS URL such as nats://127.0.0.1:4222 (schemes nats, tls, ws, wss)"))
			break
		}
	}
	if c.RelayStream == "" || strings.ContainsFunc(c.RelayStream, func(r rune) bool {
		return strings.ContainsRune(`.*>/\`, r) || unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) {
		errs = append(errs, fmt.Errorf("RELAY_STREAM=%q: must be a JetStream stream name: no spaces, '.', '*', '>', '/' or '\\'", c.RelayStream))
	}
	for tok := range strings.SplitSeq(c.RelaySubjectPrefix, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
			errs = append(errs, fmt.Errorf("RELAY_SUBJECT_PREFIX=%q: must be NATS subject tokens separated by dots, without wildcards or spaces, such as hearth or acme.hearth", c.RelaySubjectPrefix))
			break
		}
	}
	return errs
}
