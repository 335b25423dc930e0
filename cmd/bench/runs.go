package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/adapters/refdata"
	"hearth/app/access"
	"hearth/app/event"
	"hearth/app/order"
	"hearth/app/schedule"
	"hearth/app/servicerequest"
	"hearth/app/uuid"
	"hearth/migrations"
)

var orderDecode = order.Decode

// isolation: the orders projection runs beside a projection of the same
// topic that fails on every event (its retry budget running throughout).
func (b *bench) isolation(ctx context.Context) (stats, error) {
	db, url, err := b.newDB(ctx, "isolation", migrations.EventStore, migrations.ReadModel)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	orders, err := readmodel.NewOrders(db)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- pubsub.RunPipeline(ctx, pubsub.PipelineConfig{EventStore: db.DB, ConnString: url, SameDB: true,
			Fallback: fallbackPoll, Log: b.log},
			pubsub.Projection{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode, Apply: orders.Apply, ApplyBatch: orders.ApplyBatch},
			pubsub.Projection{Name: "failing", Topic: pubsub.TopicOrders, Decode: order.Decode,
				Apply: func(context.Context, event.Recorded) error { return errors.New("bench: this projection always fails") }})
	}()
	defer func() { cancel(); <-done }()
	b.progress("isolation: %d events/s for %s, after %s of warm-up, while the projection 'failing' fails on every event", rate, isolationFor, latencyWarmUp)
	if err := b.warmUp(ctx, db, url); err != nil {
		return nil, err
	}
	return measureLatency(ctx, db, url, isolationFor)
}

// commands: POST /v1/orders at concurrency 16 against the Hearth process
// of the latency run, then pgbench with the same SQL shape, then the same
// transaction from Go (database/sql and pgx, as Hearth uses them).
func (b *bench) commands(ctx context.Context) (hearth, plain, fromGo string, err error) {
	es, err := openURL(ctx, b.hearthDB)
	if err != nil {
		return "", "", "", err
	}
	defer es.Close()
	ref, err := refdata.New(es)
	if err != nil {
		return "", "", "", err
	}
	key, err := ref.CreateKey(ctx, "bench-http", access.Operator, "")
	if err != nil {
		return "", "", "", err
	}
	customerID := uuid.New()
	if _, err := es.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, customerID, key.MerchantID); err != nil {
		return "", "", "", err
	}
	body, _ := json.Marshal(map[string]any{"customer_id": customerID, "amount_cents": 12000})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	b.progress("commands: POST /v1/orders, concurrency %d for %s", concurrency, commandsFor)
	var mu sync.Mutex
	var lat stats
	var failures int
	start := time.Now()
	end := start.Add(commandsFor)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for time.Now().Before(end) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.hearthURL+"/v1/orders", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key.Secret)
				t := time.Now()
				res, err := client.Do(req)
				d := time.Since(t)
				ok := err == nil && res.StatusCode == http.StatusCreated
				if res != nil {
					_, _ = bytes.NewBuffer(nil).ReadFrom(res.Body)
					res.Body.Close()
				}
				mu.Lock()
				if ok {
					lat = append(lat, d)
				} else {
					failures++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, c := range b.procs {
		b.stopHearth(c) // pgbench runs alone, as Hearth did
	}
	hearth = fmt.Sprintf("%.0f req/s, p99 %s", float64(len(lat))/elapsed.Seconds(), ms(lat.pct(0.99)))
	if failures > 0 {
		hearth += fmt.Sprintf(" (%d failed)", failures)
	}
	shape, err := orderShape(ctx, es, key.ID, key.MerchantID, customerID)
	if err != nil {
		return "", "", "", err
	}
	if plain, err = b.pgbench(ctx, shape); err != nil {
		return "", "", "", err
	}
	fromGo, err = b.goLoop(ctx, es, shape)
	return hearth, plain, fromGo, err
}

// shape is what creating an order runs, with the values of one real order:
// the key lookup, then in one transaction the customer check, the events
// insert and the topic insert (which fires the NOTIFY trigger).
type shape struct {
	keyHash                                         []byte
	merchantID, customerID, data, payload, metadata string
}

func orderShape(ctx context.Context, es *bun.DB, keyID, merchantID, customerID string) (shape, error) {
	sh := shape{merchantID: merchantID, customerID: customerID}
	if err := es.QueryRowContext(ctx, `SELECT key_hash FROM api_keys WHERE id = ?`, keyID).Scan(&sh.keyHash); err != nil {
		return shape{}, err
	}
	err := es.QueryRowContext(ctx, `SELECT e.data::text, w.payload::text, w.metadata::text FROM events e, watermill_orders w
		WHERE e.event_id::text = w.uuid LIMIT 1`).Scan(&sh.data, &sh.payload, &sh.metadata)
	return sh, err
}

// goLoop runs the transaction of sh from concurrency goroutines for
// commandsFor, through database/sql and pgx with prepared statements: what
// Go's driver stack allows on this machine, without HTTP, JSON or Bun.
func (b *bench) goLoop(ctx context.Context, es *bun.DB, sh shape) (string, error) {
	b.progress("commands: the same transaction from Go (database/sql + pgx), %d goroutines for %s", concurrency, commandsFor)
	db := es.DB
	db.SetMaxOpenConns(concurrency)
	once := func() error {
		var keyID string
		if err := db.QueryRowContext(ctx, `SELECT id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`, sh.keyHash).Scan(&keyID); err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM customers WHERE id = $1 AND merchant_id = $2)`, sh.customerID, sh.merchantID).Scan(&exists); err != nil {
			return err
		}
		var position int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, causation_id, actor)
			VALUES (gen_random_uuid(), 'order', gen_random_uuid(), 1, $1, 'order.created', $2, now(), 'bench', '', 'key:bench') RETURNING position`,
			sh.merchantID, sh.data).Scan(&position); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO "watermill_orders" (uuid, payload, metadata, transaction_id) VALUES (gen_random_uuid()::text, $1, $2, pg_current_xact_id())`,
			sh.payload, sh.metadata); err != nil {
			return err
		}
		return tx.Commit()
	}
	var done atomic.Int64
	end := time.Now().Add(commandsFor)
	g, ctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range concurrency {
		g.Go(func() error {
			for time.Now().Before(end) {
				if err := once(); err != nil {
					return err
				}
				done.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return "", fmt.Errorf("go loop: %w", err)
	}
	return fmt.Sprintf("%.0f tx/s", float64(done.Load())/time.Since(start).Seconds()), nil
}

func openURL(ctx context.Context, url string) (*bun.DB, error) {
	return databaseOpen(ctx, url)
}

// pgbench runs the transaction of sh (pgbench -M prepared).
func (b *bench) pgbench(ctx context.Context, sh shape) (string, error) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
		if len(matches) == 0 {
			return "pgbench not installed", nil
		}
		bin = matches[len(matches)-1]
	}
	hash, customerID, merchantID, data, payload, metadata := hex.EncodeToString(sh.keyHash), sh.customerID, sh.merchantID, sh.data, sh.payload, sh.metadata
	// JSON goes in hex: pgbench would read its "key":value colons as variables.
	q := func(s string) string {
		return "convert_from(decode('" + hex.EncodeToString([]byte(s)) + "', 'hex'), 'UTF8')"
	}
	script := strings.Join([]string{
		`SELECT id, merchant_id, role, staff_id FROM api_keys WHERE key_hash = decode('` + hash + `', 'hex') AND revoked_at IS NULL;`,
		`BEGIN;`,
		`SELECT EXISTS (SELECT 1 FROM customers WHERE id = '` + customerID + `' AND merchant_id = '` + merchantID + `');`,
		`INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, causation_id, actor) ` +
			`VALUES (gen_random_uuid(), 'order', gen_random_uuid(), 1, '` + merchantID + `', 'order.created', ` + q(data) + `::jsonb, now(), 'bench', '', ` + q("key:bench") + `) RETURNING position;`,
		`INSERT INTO "watermill_orders" (uuid, payload, metadata, transaction_id) VALUES (gen_random_uuid()::text, ` + q(payload) + `::json, ` + q(metadata) + `::json, pg_current_xact_id());`,
		`COMMIT;`,
	}, "\n") + "\n"
	dir, err := os.MkdirTemp("", "pgbench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "create_order.sql")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return "", err
	}
	b.progress("commands: pgbench, same SQL shape, %d clients for %s", concurrency, commandsFor)
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-c", strconv.Itoa(concurrency), "-j", "2",
		"-T", strconv.Itoa(max(1, int(commandsFor.Seconds()))), "-f", file,
		"-h", "127.0.0.1", "-p", strconv.Itoa(b.cluster.Port()), "-U", "postgres", "latency")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pgbench: %w: %s", err, out)
	}
	tps := regexp.MustCompile(`tps = ([0-9.]+)`).FindSubmatch(out)
	avg := regexp.MustCompile(`latency average = ([0-9.]+ ms)`).FindSubmatch(out)
	if tps == nil {
		return "", fmt.Errorf("pgbench output: %s", out)
	}
	res := fmt.Sprintf("%s tx/s", strings.Split(string(tps[1]), ".")[0])
	if avg != nil {
		res += fmt.Sprintf(", average %s", avg[1])
	}
	return res, nil
}

// catchUp builds a backlog and measures who consumes it how fast.
func (b *bench) catchUp(ctx context.Context) ([]row, error) {
	db, url, err := b.newDB(ctx, "backlog", migrations.EventStore, migrations.ReadModel)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	b.progress("catch-up: writing a backlog of %d events over orders, service requests and schedules", backlogEvents)
	if err := writeBacklog(ctx, db); err != nil {
		return nil, err
	}

	b.progress("catch-up: Hearth (a fresh process on the backlog)")
	start := time.Now()
	cmd, _, err := b.startHearth(ctx, "catch-up", url)
	if err != nil {
		return nil, err
	}
	if err := waitConsumed(ctx, db, backlogProjections, start, func() { b.sampleRSS(cmd) }); err != nil {
		return nil, fmt.Errorf("hearth: %w", err)
	}
	hearth := time.Since(start)
	b.stopHearth(cmd)
	// The offsets say every event was consumed; the change log must say
	// every one was applied.
	var applied int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM change_log`).Scan(&applied); err != nil {
		return nil, err
	}
	if applied != backlogEvents {
		return nil, fmt.Errorf("hearth consumed the backlog but applied %d of its %d events", applied, backlogEvents)
	}

	b.progress("catch-up: plain watermill-sql, handler that does nothing")
	noop := func(context.Context, event.Recorded) error { return nil }
	noopTime, err := b.consume(ctx, db, "noop_", func(p pubsub.Projection) pubsub.Projection { p.Apply = noop; return p })
	if err != nil {
		return nil, err
	}

	b.progress("catch-up: plain watermill-sql, one read-model transaction per event, for %s", perEventTxFor)
	rm, _, err := b.newDB(ctx, "backlog_rm", migrations.ReadModel)
	if err != nil {
		return nil, err
	}
	defer rm.Close()
	perEvent, err := b.perEventTx(ctx, db, rm)
	if err != nil {
		return nil, err
	}
	rate := func(d time.Duration) string {
		return fmt.Sprintf("%.0f events/s", float64(backlogEvents)/d.Seconds())
	}
	return []row{
		{fmt.Sprintf("catch-up of %d events over 3 aggregates, every guarantee", backlogEvents), rate(hearth) + fmt.Sprintf(" (%.1f s from process start)", hearth.Seconds()),
			rate(noopTime) + " (handler does nothing)", "plain: watermill-sql subscribers, Hearth's router, three topics at once"},
		{"catch-up, one read-model transaction per event", "", perEvent, "plain: the same projections through watermill-sql, measured over " + perEventTxFor.String()},
	}, nil
}

var backlogProjections = []pubsub.Projection{
	{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode},
	{Name: "service_requests", Topic: pubsub.TopicServiceRequests, Decode: servicerequest.Decode},
	{Name: "schedules", Topic: pubsub.TopicSchedules, Decode: schedule.Decode},
}

// consume runs plain watermill-sql consumer groups (prefix + topic) over
// the three topics until each has acked the topic's last message.
func (b *bench) consume(ctx context.Context, db *bun.DB, prefix string, with func(pubsub.Projection) pubsub.Projection) (time.Duration, error) {
	var ps []pubsub.Projection
	for _, p := range backlogProjections {
		p = with(p)
		p.Name = prefix + p.Name
		ps = append(ps, p)
	}
	poison, err := pubsub.SQLPublisher(db.DB, b.log)
	if err != nil {
		return 0, err
	}
	router, err := pubsub.NewRouter(pubsub.RouterConfig{Subscriber: pubsub.SQLSubscribers(db.DB, b.log, 10*time.Millisecond), Poison: poison, Log: b.log}, ps...)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	stop := runRouter(ctx, router)
	defer stop()
	if err := waitConsumed(ctx, db, ps, start, func() {}); err != nil {
		return 0, fmt.Errorf("plain consumers: %w", err)
	}
	return time.Since(start), nil
}

// waitConsumed waits until the consumer group of every projection has
// acked its topic's last message: a few index lookups every 10 ms, so
// watching costs the run next to nothing. each runs at every look.
func waitConsumed(ctx context.Context, db *bun.DB, ps []pubsub.Projection, start time.Time, each func()) error {
	for {
		each()
		done := true
		for _, p := range ps {
			var ok bool
			err := db.QueryRowContext(ctx, `SELECT coalesce((SELECT o.offset_acked = m."offset" AND o.last_processed_transaction_id = m.transaction_id
				FROM `+pubsub.Offsets.MessagesOffsetsTable(p.Topic)+` o,
				(SELECT "offset", transaction_id FROM `+pubsub.Schema.MessagesTable(p.Topic)+` ORDER BY transaction_id DESC, "offset" DESC LIMIT 1) m
				WHERE o.consumer_group = ?), false)`, p.Name).Scan(&ok)
			if err != nil {
				return err
			}
			done = done && ok
		}
		if done {
			return nil
		}
		if time.Since(start) > 3*time.Minute {
			return errors.New("the backlog was not consumed in 3 minutes")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// perEventTx runs the projections' one-event-per-transaction Apply through
// plain watermill-sql into a separate read model, for perEventTxFor.
func (b *bench) perEventTx(ctx context.Context, db, rm *bun.DB) (string, error) {
	orders, err := readmodel.NewOrders(rm)
	if err != nil {
		return "", err
	}
	requests, err := readmodel.NewServiceRequests(rm)
	if err != nil {
		return "", err
	}
	schedules, err := readmodel.NewSchedules(rm)
	if err != nil {
		return "", err
	}
	applies := map[string]func(context.Context, event.Recorded) error{
		"orders": orders.Apply, "service_requests": requests.Apply, "schedules": schedules.Apply,
	}
	var ps []pubsub.Projection
	for _, p := range backlogProjections {
		p.Apply = applies[p.Name]
		p.Name = "tx_" + p.Name
		ps = append(ps, p)
	}
	poison, err := pubsub.SQLPublisher(db.DB, b.log)
	if err != nil {
		return "", err
	}
	router, err := pubsub.NewRouter(pubsub.RouterConfig{Subscriber: pubsub.SQLSubscribers(db.DB, b.log, 10*time.Millisecond), Poison: poison, Log: b.log}, ps...)
	if err != nil {
		return "", err
	}
	start := time.Now()
	stop := runRouter(ctx, router)
	time.Sleep(perEventTxFor)
	var n int
	if err := rm.QueryRowContext(ctx, `SELECT count(*) FROM change_log`).Scan(&n); err != nil {
		stop()
		return "", err
	}
	elapsed := time.Since(start)
	stop()
	return fmt.Sprintf("%.0f events/s", float64(n)/elapsed.Seconds()), nil
}

// writeBacklog appends backlogEvents events: streams of 4 events each,
// a third of them orders, service requests and schedules, 50 streams per
// transaction, from 4 writers.
func writeBacklog(ctx context.Context, db *bun.DB) error {
	merchantID, customerID, err := tenant(ctx, db)
	if err != nil {
		return err
	}
	store, err := pubsub.NewStore(db, nil)
	if err != nil {
		return err
	}
	meta := event.Meta{MerchantID: merchantID, Actor: "bench", CorrelationID: uuid.New(), OccurredAt: time.Now()}
	streams := backlogEvents / 4
	const perTx, writers = 50, 4
	g, ctx := errgroup.WithContext(ctx)
	for w := range writers {
		g.Go(func() error {
			for first := w * perTx; first < streams; first += writers * perTx {
				err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					for i := first; i < min(first+perTx, streams); i++ {
						st, id, events, err := backlogStream(i, customerID)
						if err != nil {
							return err
						}
						if _, _, err := store.Append(ctx, tx, st, meta, id, 0, events); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// backlogStream is stream i: an aggregate created and changed three times.
func backlogStream(i int, customerID string) (pubsub.Stream, string, []event.Event, error) {
	id := uuid.New()
	switch i % 3 {
	case 0:
		o, err := order.New(order.NewOrder{ID: id, CustomerID: customerID, AmountCents: 100})
		if err != nil {
			return pubsub.Stream{}, "", nil, err
		}
		for k := range 3 {
			if err := o.UpdateDetails(order.Details{CustomerID: customerID, AmountCents: int64(200 + k)}); err != nil {
				return pubsub.Stream{}, "", nil, err
			}
		}
		return pubsub.OrderStream, id, o.Changes(), nil
	case 1:
		r, err := servicerequest.New(id, customerID, servicerequest.Sources[0], servicerequest.Details{Content: "leaking tap"})
		if err != nil {
			return pubsub.Stream{}, "", nil, err
		}
		for k := range 3 {
			if err := r.UpdateDetails(servicerequest.Details{Content: "leaking tap, visit " + strconv.Itoa(k)}); err != nil {
				return pubsub.Stream{}, "", nil, err
			}
		}
		return pubsub.ServiceRequestStream, id, r.Changes(), nil
	default:
		start := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
		s, err := schedule.New(id, uuid.New(), schedule.Window{StaffID: uuid.New(), StartAt: start, EndAt: start.Add(time.Hour)}, "")
		if err != nil {
			return pubsub.Stream{}, "", nil, err
		}
		for k := range 3 {
			at := start.Add(time.Duration(k+1) * 24 * time.Hour)
			if err := s.Reassign(schedule.Window{StaffID: uuid.New(), StartAt: at, EndAt: at.Add(time.Hour)}); err != nil {
				return pubsub.Stream{}, "", nil, err
			}
		}
		return pubsub.ScheduleStream, id, s.Changes(), nil
	}
}
