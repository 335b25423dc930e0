package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/pubsub/relay"
	"hearth/adapters/readmodel"
	"hearth/adapters/webhooks"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/aggregates"
	"hearth/internal/database"
	"hearth/internal/natsserver"
	"hearth/internal/pgcluster"
	"hearth/internal/refdata"
	"hearth/migrations"
)

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
	failing := projector.ProjectionOf(aggregates.Order.Facts,
		func(context.Context, event.Recorded) error { return errors.New("bench: this projection always fails") }, nil)
	failing.Name = "failing"
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		pr, err := projector.New(projector.Config{EventStore: db.DB, ConnString: url, SameDB: true,
			Fallback: fallbackPoll, Log: b.log,
			Projections: []projector.Projection{projector.ProjectionOf(orders.Aggregate(), orders.Apply, orders.ApplyBatch), failing}})
		if err != nil {
			done <- err
			return
		}
		done <- pr.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	b.progress("isolation: %d events/s for %s, after %s of warm-up, while the projection 'failing' fails on every event", rate, isolationFor, latencyWarmUp)
	if err := b.warmUp(ctx, db, url); err != nil {
		return nil, err
	}
	return measureLatency(ctx, db, url, isolationFor)
}

// commandResults are the command-throughput rows: Hearth in each mode,
// the baseline binary (another commit's) in mode api and pgbench, on the
// bench's cluster (fsync off) and on a durable one (fsync on), and the
// bare Go loop.
type commandResults struct {
	fast, durable commandRun
	baselineRef   string
	goLoop        string
}

// commandRun is what one cluster gave.
type commandRun struct {
	api, baseline, all postResult
	// pgbench took turns with mode api (and the baseline), pgbenchAll with
	// mode all.
	pgbench, pgbenchAll pgbenchResult
	baselineErr         string
	rounds              int
}

// commandRounds: Hearth in mode api, the baseline Hearth and pgbench take
// turns, commandsFor / commandRounds each, so that a change in the host's
// load while they run (on this VM, 10-25 % from minute to minute) does not
// decide their comparison; durableRounds the same on the durable cluster.
const commandRounds, durableRounds = 4, 2

// commands: POST /v1/orders at concurrency 16 against a Hearth in mode api
// (the write path alone, as pgbench runs it), in turns with the baseline
// binary (BENCH_BASELINE, a git ref; "none" leaves it out) and with
// pgbench running the same SQL shape; then against a Hearth in mode all
// (the projector on the same two cores); then the same transaction from
// Go. The same again, shorter, on a second throwaway cluster with fsync
// and synchronous_commit on (the bench's runs with both off, so that
// Hearth's own cost shows; users run with them on).
func (b *bench) commands(ctx context.Context) (commandResults, error) {
	res := commandResults{baselineRef: cmp.Or(os.Getenv("BENCH_BASELINE"), defaultBaseline)}
	var baselineBin, baselineErr string
	if res.baselineRef != "none" {
		work, err := os.MkdirTemp("", "hearth-baseline-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(work)
		// A ref that does not build (or no git) leaves its row without a
		// figure, not the section.
		if baselineBin, _, err = b.buildBaseline(ctx, work); err != nil {
			baselineErr = err.Error()
		}
	}
	var sh shape
	var err error
	res.fast, sh, err = b.commandRun(ctx, commandRounds, baselineBin)
	if err != nil {
		return res, err
	}
	res.fast.baselineErr = baselineErr
	es, err := openURL(ctx, b.cluster.URL("commands"))
	if err != nil {
		return res, err
	}
	res.goLoop, err = b.goLoop(ctx, es, sh)
	es.Close()
	if err != nil {
		return res, err
	}

	b.progress("commands: starting a second throwaway Postgres, with fsync and synchronous_commit on")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Install: true, Log: b.log})
	if err != nil {
		return res, err
	}
	defer cluster.Stop()
	durable := &bench{cluster: cluster, bin: b.bin, log: b.log, progress: func(format string, args ...any) { b.progress("fsync on: "+format, args...) }}
	defer durable.stopProcesses()
	res.durable, _, err = durable.commandRun(ctx, durableRounds, "")
	return res, err
}

// commandsDB is a database for the commands rows: the schema, a key, a
// customer, and the request that creates an order for them.
type commandsDB struct {
	es         *bun.DB
	url        string
	key        refdata.NewKey
	customerID string
	request    []byte
}

func (b *bench) commandsDB(ctx context.Context, name string) (commandsDB, error) {
	var d commandsDB
	var err error
	if d.es, d.url, err = b.newDB(ctx, name, migrations.EventStore, migrations.ReadModel); err != nil {
		return d, err
	}
	ref, err := refdata.New(d.es)
	if err == nil {
		d.key, err = ref.CreateKey(ctx, "bench-http", access.Operator, "")
	}
	if err == nil {
		d.customerID = uuid.New()
		_, err = d.es.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, d.customerID, d.key.MerchantID)
	}
	if err != nil {
		d.es.Close()
		return d, err
	}
	body, _ := json.Marshal(map[string]any{"customer_id": d.customerID, "amount_cents": 12000})
	d.request = []byte(fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: hearth\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", d.key.Secret, len(body), body))
	return d, nil
}

// commandRun measures the commands rows on b's cluster: rounds turns of
// commandsFor / commandRounds for each of Hearth in mode api, the binary
// baselineBin (when set) and pgbench; then as many turns of Hearth in mode
// all and pgbench. It returns the shape of the transaction pgbench ran.
//
// Mode all writes to a database of its own: pgbench's rows in the topic
// would otherwise wake its projector during pgbench's turns (NOTIFY stays
// in its database), and mode api's turns would leave it a backlog.
func (b *bench) commandRun(ctx context.Context, rounds int, baselineBin string) (commandRun, shape, error) {
	res := commandRun{rounds: rounds}
	var sh shape
	db, err := b.commandsDB(ctx, "commands")
	if err != nil {
		return res, sh, err
	}
	defer db.es.Close()
	es, url, key, customerID, request := db.es, db.url, db.key, db.customerID, db.request

	type contender struct {
		cmd  *exec.Cmd
		base string
		res  *postResult
	}
	// On an error, run's clean-up stops the processes.
	api, base, err := b.startHearth(ctx, "commands, mode api", url, "api")
	if err != nil {
		return res, sh, err
	}
	contenders := []contender{{api, base, &res.api}}
	if baselineBin != "" {
		old, oldBase, err := b.start(ctx, hearthRun{name: "commands, baseline", url: url, mode: "api", bin: baselineBin})
		if err != nil {
			return res, sh, err
		}
		contenders = append(contenders, contender{old, oldBase, &res.baseline})
	}
	slice := commandsFor / commandRounds
	// A short turn each first, not counted: connections and caches. It
	// also writes the order whose rows pgbench's transaction copies.
	for _, c := range contenders {
		postOrders(c.base, c.cmd.Process.Pid, request, slice/4, concurrency, 0)
	}
	if sh, err = orderShape(ctx, es, key.ID, key.MerchantID, customerID); err != nil {
		return res, sh, err
	}
	for round := range rounds {
		b.progress("commands, round %d of %d: POST /v1/orders to %d Hearth binaries in mode api, then pgbench, %d clients for %s each",
			round+1, rounds, len(contenders), concurrency, slice)
		for i := range contenders { // which one goes first alternates
			c := contenders[(round+i)%len(contenders)]
			c.res.add(postOrders(c.base, c.cmd.Process.Pid, request, slice, concurrency, 0))
		}
		run, err := b.pgbench(ctx, sh, slice)
		if err != nil {
			return res, sh, err
		}
		res.pgbench.add(run)
	}
	for _, c := range contenders {
		b.stopHearth(c.cmd)
	}

	allDB, err := b.commandsDB(ctx, "commands_all")
	if err != nil {
		return res, sh, err
	}
	defer allDB.es.Close()
	all, base, err := b.start(ctx, hearthRun{name: "commands, mode all", url: allDB.url, mode: "all"})
	if err != nil {
		return res, sh, err
	}
	postOrders(base, all.Process.Pid, allDB.request, slice/4, concurrency, 0) // not counted, as above
	if err := awaitLive(b.adminOf(all), 3*time.Minute); err != nil {
		return res, sh, err
	}
	orders := []projector.Projection{projector.ProjectionOf(aggregates.Order.Facts, nil, nil)}
	for round := range rounds {
		b.progress("commands, round %d of %d: POST /v1/orders to Hearth in mode all, then pgbench, %d clients for %s each",
			round+1, rounds, concurrency, slice)
		res.all.add(postOrders(base, all.Process.Pid, allDB.request, slice, concurrency, 0))
		// What the turn left to project is projected before pgbench's
		// turn, not during it.
		if err := waitConsumed(ctx, allDB.es, orders, time.Now(), time.Minute, func() {}); err != nil {
			return res, sh, err
		}
		run, err := b.pgbench(ctx, sh, slice)
		if err != nil {
			return res, sh, err
		}
		res.pgbenchAll.add(run)
	}
	b.stopHearth(all)
	return res, sh, nil
}

// awaitLive waits until the /metrics of the admin listener at admin shows
// every projection led and live (allLive), for up to limit: longer than
// start waits, for a process that first catches up on what the runs
// before wrote.
func awaitLive(admin string, limit time.Duration) error {
	if err := awaitMetrics(context.Background(), admin, limit, allLive); err != nil {
		return fmt.Errorf("the projections were not live: %w", err)
	}
	return nil
}

// postResult is what POST /v1/orders runs gave.
type postResult struct {
	lat      stats // of the requests that succeeded
	elapsed  time.Duration
	failures int
	firstErr error
	cpu      cpuSpent
}

func (r *postResult) add(o postResult) {
	r.lat = append(r.lat, o.lat...)
	r.elapsed += o.elapsed
	r.failures += o.failures
	r.firstErr = cmp.Or(r.firstErr, o.firstErr)
	r.cpu = r.cpu.add(o.cpu)
}

func (r postResult) perSecond() float64 {
	if r.elapsed == 0 {
		return 0
	}
	return float64(len(r.lat)) / r.elapsed.Seconds()
}

func (r postResult) String() string {
	s := fmt.Sprintf("%.0f req/s, p99 %s", r.perSecond(), ms(r.lat.pct(0.99)))
	if r.failures > 0 {
		s += fmt.Sprintf(" (%d failed, the first: %v)", r.failures, r.firstErr)
	}
	return s
}

// postOrders sends request (a POST /v1/orders) to the Hearth process pid
// listening at base, from clients clients for d (or, when d is 0, count
// times in all); nothing else runs meanwhile.
func postOrders(base string, pid int, request []byte, d time.Duration, clients, count int) postResult {
	var res postResult
	var mu sync.Mutex
	before := cpuNow(pid)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			// One keep-alive connection per client, its request written as
			// bytes: the load generator should cost little of the machine
			// it shares with Hearth and Postgres.
			c := &httpClient{addr: strings.TrimPrefix(base, "http://")}
			defer c.close()
			for n := 0; (d > 0 && time.Now().Before(end)) || (d == 0 && n < count/clients); n++ {
				t := time.Now()
				status, err := c.do(request)
				took := time.Since(t)
				mu.Lock()
				if err == nil && status == http.StatusCreated {
					res.lat = append(res.lat, took)
				} else {
					res.failures++
					if res.firstErr == nil {
						res.firstErr = cmp.Or(err, fmt.Errorf("status %d", status))
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cpu = cpuNow(pid).since(before)
	return res
}

// httpClient is one keep-alive HTTP/1.1 connection that sends a ready-made
// request and reads the answer with net/http's parser.
type httpClient struct {
	addr string
	conn net.Conn
	r    *bufio.Reader
}

func (c *httpClient) do(request []byte) (status int, err error) {
	if c.conn == nil {
		if c.conn, err = net.Dial("tcp", c.addr); err != nil {
			return 0, err
		}
		c.r = bufio.NewReader(c.conn)
	}
	if _, err = c.conn.Write(request); err == nil {
		var res *http.Response
		if res, err = http.ReadResponse(c.r, nil); err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			status = res.StatusCode
			if res.Close {
				c.close()
			}
		}
	}
	if err != nil {
		c.close()
	}
	return status, err
}

func (c *httpClient) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
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
// commandsFor, sent as Hearth sends it (the key lookup, then one pgx batch
// on a database/sql connection: BEGIN, the customer check, the inserts and
// COMMIT; two round trips) but without HTTP, JSON or Bun: what Go's driver
// stack allows on this machine.
func (b *bench) goLoop(ctx context.Context, es *bun.DB, sh shape) (string, error) {
	b.progress("commands: the same transaction from Go (pgx batches, as Hearth sends it), %d goroutines for %s", concurrency, commandsFor)
	db := es.DB
	db.SetMaxOpenConns(concurrency)
	once := func() error {
		return database.WithConn(ctx, db, func(conn *pgx.Conn) error {
			var keyID string
			if err := conn.QueryRow(ctx, `SELECT id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`, sh.keyHash).Scan(&keyID); err != nil {
				return err
			}
			write := &pgx.Batch{}
			write.Queue(`BEGIN`)
			write.Queue(`SELECT name FROM customers WHERE id = $1 AND merchant_id = $2`, sh.customerID, sh.merchantID)
			write.Queue(`INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, causation_id, actor)
				VALUES (gen_random_uuid(), 'order', gen_random_uuid(), 1, $1, 'order.created', $2, now(), 'bench', '', 'key:bench') RETURNING position`,
				sh.merchantID, sh.data)
			write.Queue(`INSERT INTO "watermill_orders" (uuid, payload, metadata, transaction_id) VALUES (gen_random_uuid()::text, $1, $2, pg_current_xact_id())`,
				sh.payload, sh.metadata)
			write.Queue(`COMMIT`)
			return conn.SendBatch(ctx, write).Close()
		})
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

// pgbenchResult is what pgbench runs gave: their transactions, and the
// CPU of Postgres and of pgbench itself over the middle 80 % of each run.
type pgbenchResult struct {
	transactions float64
	elapsed      time.Duration
	latency      time.Duration // summed over transactions, for the average
	cpu          cpuSpent
	cpuTx        float64 // transactions while cpu was sampled
	missing      string  // why there is no figure
}

func (r *pgbenchResult) add(o pgbenchResult) {
	r.transactions += o.transactions
	r.elapsed += o.elapsed
	r.latency += o.latency
	r.cpu = r.cpu.add(o.cpu)
	r.cpuTx += o.cpuTx
	r.missing = cmp.Or(r.missing, o.missing)
}

func (r pgbenchResult) perSecond() float64 {
	if r.elapsed == 0 {
		return 0
	}
	return r.transactions / r.elapsed.Seconds()
}

func (r pgbenchResult) String() string {
	if r.missing != "" {
		return r.missing
	}
	return fmt.Sprintf("%.0f tx/s, average %s", r.perSecond(), ms(time.Duration(float64(r.latency)/r.transactions)))
}

// pgbench runs the transaction of sh (pgbench -M prepared) for d.
func (b *bench) pgbench(ctx context.Context, sh shape, d time.Duration) (pgbenchResult, error) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
		if len(matches) == 0 {
			return pgbenchResult{missing: "pgbench not installed"}, nil
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
		`SELECT name FROM customers WHERE id = '` + customerID + `' AND merchant_id = '` + merchantID + `';`,
		`INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, causation_id, actor) ` +
			`VALUES (gen_random_uuid(), 'order', gen_random_uuid(), 1, '` + merchantID + `', 'order.created', ` + q(data) + `::jsonb, now(), 'bench', '', ` + q("key:bench") + `) RETURNING position;`,
		`INSERT INTO "watermill_orders" (uuid, payload, metadata, transaction_id) VALUES (gen_random_uuid()::text, ` + q(payload) + `::json, ` + q(metadata) + `::json, pg_current_xact_id());`,
		`COMMIT;`,
	}, "\n") + "\n"
	dir, err := os.MkdirTemp("", "pgbench-")
	if err != nil {
		return pgbenchResult{}, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "create_order.sql")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return pgbenchResult{}, err
	}
	seconds := max(1, int(d.Seconds()))
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-c", strconv.Itoa(concurrency), "-j", "2",
		"-T", strconv.Itoa(seconds), "-f", file,
		"-h", "127.0.0.1", "-p", strconv.Itoa(b.cluster.Port()), "-U", "postgres", "commands")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return pgbenchResult{}, err
	}
	// Sample the CPU over the middle of the run, away from connecting and
	// disconnecting; pgbench reports no progress to wait on, so the bench
	// watches the clock.
	run := time.Duration(seconds) * time.Second
	time.Sleep(run / 10)
	before, from := cpuNow(cmd.Process.Pid), time.Now()
	time.Sleep(run * 8 / 10)
	after, window := cpuNow(cmd.Process.Pid), time.Since(from)
	if err := cmd.Wait(); err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench: %w: %s", err, out.Bytes())
	}
	tps := regexp.MustCompile(`tps = ([0-9.]+)`).FindSubmatch(out.Bytes())
	avg := regexp.MustCompile(`latency average = ([0-9.]+) ms`).FindSubmatch(out.Bytes())
	if tps == nil || avg == nil {
		return pgbenchResult{}, fmt.Errorf("pgbench output: %s", out.Bytes())
	}
	perSecond, _ := strconv.ParseFloat(string(tps[1]), 64)
	avgMS, _ := strconv.ParseFloat(string(avg[1]), 64)
	res := pgbenchResult{transactions: perSecond * run.Seconds(), elapsed: run, cpu: after.since(before), cpuTx: perSecond * window.Seconds()}
	res.latency = time.Duration(res.transactions * avgMS * float64(time.Millisecond))
	return res, nil
}

// catchUpTarget is the catch-up rate with every consumer on that issue 23
// asks for.
const catchUpTarget = 40000.0

// hookedEvents is the share of the catch-up backlog (one in hookedShare)
// written for a merchant with a webhook endpoint; the rest is of a
// merchant without one, whose events the fan-out should not pay for.
const hookedShare = 100

// catchUp builds a backlog and measures who consumes it how fast: Hearth
// with every consumer on (the projections, the webhook fan-out, which
// queues deliveries to a receiver of the bench, and the relay to a
// JetStream of a throwaway nats-server), beside what one multi-row
// statement writes on the same database.
func (b *bench) catchUp(ctx context.Context) ([]row, error) {
	db, url, err := b.newDB(ctx, "backlog", migrations.EventStore, migrations.ReadModel)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	hooked := backlogEvents / hookedShare
	b.progress("catch-up: writing a backlog of %d events over orders, service requests and schedules (%d of a merchant with a webhook endpoint)", backlogEvents, hooked)
	receiver, err := newHookReceiver(0)
	if err != nil {
		return nil, err
	}
	defer receiver.close()
	// Events that queued up while the consumers were down, an hour ago.
	occurred := time.Now().Add(-time.Hour)
	if err := writeBacklog(ctx, db, backlog{customers: 1, events: backlogEvents - hooked, occurred: occurred}); err != nil {
		return nil, err
	}
	if err := writeBacklog(ctx, db, backlog{customers: 1, events: hooked, endpoint: receiver.url, occurred: occurred}); err != nil {
		return nil, err
	}
	nats, err := natsserver.Start(ctx, natsserver.Options{Install: true, Log: b.log})
	if err != nil {
		return nil, err
	}
	defer nats.Stop()
	fanout, err := webhooks.NewFanout(db)
	if err != nil {
		return nil, err
	}
	consumers := slices.Concat(backlogProjections, fanout.Projections())
	for _, topic := range relay.Topics() {
		consumers = append(consumers, projector.Projection{Name: relay.ConsumerGroup, Topic: topic})
	}

	b.progress("catch-up: Hearth (a fresh process on the backlog), with the webhook fan-out and the relay to JetStream")
	natsBefore := cpuTicks(strconv.Itoa(nats.Pid()))
	hearth, spent, err := b.hearthCatchUp(ctx, db, url, "catch-up", catchUpRun{consumers: consumers, env: []string{"RELAY_NATS_URL=" + nats.URL()}})
	if err != nil {
		return nil, err
	}
	// The rest of the machine was Postgres and the nats-server.
	natsTicks := cpuTicks(strconv.Itoa(nats.Pid())) - natsBefore
	spent.postgres -= natsTicks
	cpuPerEvent := spent.per(float64(backlogEvents))
	natsPerEvent := cpuSpent{process: natsTicks}.per(float64(backlogEvents)).process
	cpuTotal := cpuPerEvent.process + cpuPerEvent.postgres + cpuPerEvent.bench + natsPerEvent
	var deliveries int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries`).Scan(&deliveries); err != nil {
		return nil, err
	}
	if deliveries != hooked {
		return nil, fmt.Errorf("catch-up: the fan-out queued %d deliveries for %d events of the merchant with an endpoint", deliveries, hooked)
	}

	b.progress("catch-up: one multi-row statement, for %s", multiRowFor)
	multiRow, err := multiRowRate(ctx, db, multiRowFor)
	if err != nil {
		return nil, err
	}

	b.progress("catch-up: plain watermill-sql, handler that does nothing")
	noop := func(context.Context, event.Recorded) error { return nil }
	noopTime, err := b.consume(ctx, db, "noop_", func(p projector.Projection) projector.Projection { p.Apply = noop; return p })
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
	perSecond := func(d time.Duration) float64 { return float64(backlogEvents) / d.Seconds() }
	rate := func(d time.Duration) string { return fmt.Sprintf("%.0f events/s", perSecond(d)) }
	return []row{
		{fmt.Sprintf("catch-up of %d events over 3 aggregates, every guarantee, every consumer", backlogEvents), rate(hearth) + fmt.Sprintf(" (%.1f s from process start)", hearth.Seconds()),
			fmt.Sprintf("%.0f rows/s (one multi-row statement)", multiRow),
			fmt.Sprintf("**%s of what one multi-row statement writes** (100 rows an upsert, one connection, the same run). Consumers: the projections, the webhook fan-out (%d events of a merchant with an endpoint, the rest of one without; the events are an hour old, as after a worker was down) and the relay to JetStream. "+
				"CPU per event: %s, nats-server %.0f µs; %.0f µs in all, so the machine's %d cores could not pass %.0f events/s (%.0f events/s needs %.0f µs)",
				percentOf(perSecond(hearth), multiRow), hooked, cpuPerEvent, natsPerEvent, cpuTotal, runtime.NumCPU(),
				float64(runtime.NumCPU())*1e6/cpuTotal, catchUpTarget, float64(runtime.NumCPU())*1e6/catchUpTarget)},
		{"catch-up, plain watermill-sql", "", rate(noopTime) + " (handler does nothing)", "plain: watermill-sql subscribers, Hearth's router, three topics at once"},
		{"catch-up, one read-model transaction per event", "", perEvent, "plain: the same projections through watermill-sql, measured over " + perEventTxFor.String()},
	}, nil
}

// multiRowFor is how long multiRowRate writes.
var multiRowFor = 5 * time.Second

// multiRowRate upserts 100 rows a statement (rows of a read model's shape:
// ids, a version, a few values) from one connection for d, autocommit, and
// returns the rows written per second: the most a consumer on one
// connection could expect to write.
func multiRowRate(ctx context.Context, db *bun.DB, d time.Duration) (float64, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE bench_multi_row (id uuid PRIMARY KEY, merchant_id uuid NOT NULL,
		version int NOT NULL, amount_cents bigint NOT NULL, status text NOT NULL, updated_at timestamptz NOT NULL)`); err != nil {
		return 0, err
	}
	const perStatement = 100
	merchant := uuid.New()
	ids := make([]string, perStatement)
	written := 0
	err := database.WithConn(ctx, db.DB, func(conn *pgx.Conn) error {
		start := time.Now()
		for time.Since(start) < d {
			for i := range ids {
				ids[i] = uuid.New()
			}
			if _, err := conn.Exec(ctx, `INSERT INTO bench_multi_row (id, merchant_id, version, amount_cents, status, updated_at)
				SELECT id, $2, 1, 100, 'open', now() FROM unnest($1::text[]::uuid[]) id
				ON CONFLICT (id) DO UPDATE SET version = bench_multi_row.version + 1, updated_at = excluded.updated_at`, ids, merchant); err != nil {
				return err
			}
			written += perStatement
		}
		d = time.Since(start)
		return nil
	})
	return float64(written) / d.Seconds(), err
}

// catchUpRun is more of a catch-up run: the consumer groups to wait for
// (none: backlogProjections) and settings of the process.
type catchUpRun struct {
	consumers []projector.Projection
	env       []string
}

// hearthCatchUp starts a fresh Hearth in mode all on the backlog of db
// and returns the time from its start until every event is consumed (by
// the consumers of with, or the read models) and applied, and the CPU the
// process used meanwhile (start-up included).
func (b *bench) hearthCatchUp(ctx context.Context, db *bun.DB, url, name string, with ...catchUpRun) (time.Duration, cpuSpent, error) {
	run := catchUpRun{consumers: backlogProjections}
	if len(with) > 0 {
		run = with[0]
	}
	start, machine := time.Now(), cpuNow(0) // no process yet: the machine and the bench
	// Ready, not live: a slow catch-up may take longer than start's wait.
	cmd, _, err := b.start(ctx, hearthRun{name: name, url: url, mode: "all", env: run.env})
	if err != nil {
		return 0, cpuSpent{}, err
	}
	if err := waitConsumed(ctx, db, run.consumers, start, 3*time.Minute, func() { b.sampleRSS(cmd) }); err != nil {
		b.stopHearth(cmd)
		return 0, cpuSpent{}, fmt.Errorf("hearth: %w", err)
	}
	took := time.Since(start)
	// The process's whole life; the rest of the machine meanwhile.
	cpu := cpuNow(cmd.Process.Pid).since(cpuSample{bench: machine.bench, machine: machine.machine})
	b.stopHearth(cmd)
	// The offsets say every event was consumed; the change log must say
	// every one was applied.
	var applied int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM change_log`).Scan(&applied); err != nil {
		return 0, cpuSpent{}, err
	}
	if applied != backlogEvents {
		return 0, cpuSpent{}, fmt.Errorf("hearth consumed the backlog but applied %d of its %d events", applied, backlogEvents)
	}
	return took, cpu, nil
}

// backlogProjections are every aggregate type's projection, without a
// handler (the runs set one).
var backlogProjections = func() []projector.Projection {
	var ps []projector.Projection
	for _, a := range aggregates.All() {
		ps = append(ps, projector.ProjectionOf(a, nil, nil))
	}
	return ps
}()

// consume runs plain watermill-sql consumer groups (prefix + topic) over
// the three topics until each has acked the topic's last message.
func (b *bench) consume(ctx context.Context, db *bun.DB, prefix string, with func(projector.Projection) projector.Projection) (time.Duration, error) {
	var ps []projector.Projection
	for _, p := range backlogProjections {
		p = with(p)
		p.Name = prefix + p.Name
		ps = append(ps, p)
	}
	poison, err := projector.SQLPublisher(db.DB, b.log)
	if err != nil {
		return 0, err
	}
	router, err := projector.NewRouter(projector.RouterConfig{Subscriber: projector.SQLSubscribers(db.DB, b.log, 10*time.Millisecond), Poison: poison, Log: b.log}, ps...)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	stop := runRouter(ctx, router)
	defer stop()
	if err := waitConsumed(ctx, db, ps, start, 3*time.Minute, func() {}); err != nil {
		return 0, fmt.Errorf("plain consumers: %w", err)
	}
	return time.Since(start), nil
}

// waitConsumed waits until the consumer group of every projection has
// acked its topic's last message (a topic with none, such as plans' in a
// backlog of orders, is consumed): a few index lookups every 10 ms, so
// watching costs the run next to nothing. each runs at every look.
func waitConsumed(ctx context.Context, db *bun.DB, ps []projector.Projection, start time.Time, limit time.Duration, each func()) error {
	for {
		each()
		done := true
		for _, p := range ps {
			var ok bool
			err := db.QueryRowContext(ctx, `SELECT coalesce((SELECT o.offset_acked = m."offset" AND o.last_processed_transaction_id = m.transaction_id
				FROM `+pubsub.Offsets.MessagesOffsetsTable(p.Topic)+` o,
				(SELECT "offset", transaction_id FROM `+pubsub.Schema.MessagesTable(p.Topic)+` ORDER BY transaction_id DESC, "offset" DESC LIMIT 1) m
				WHERE o.consumer_group = ?), NOT EXISTS (SELECT 1 FROM `+pubsub.Schema.MessagesTable(p.Topic)+`))`, p.Name).Scan(&ok)
			if err != nil {
				return err
			}
			done = done && ok
		}
		if done {
			return nil
		}
		if time.Since(start) > limit {
			return fmt.Errorf("the backlog was not consumed in %s", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// perEventTx runs the projections' one-event-per-transaction Apply through
// plain watermill-sql into a separate read model, for perEventTxFor.
func (b *bench) perEventTx(ctx context.Context, db, rm *bun.DB) (string, error) {
	log, err := pubsub.NewEventLog(db)
	if err != nil {
		return "", err
	}
	projectors, err := readmodel.NewProjectors(rm, readmodel.Refold{Log: log})
	if err != nil {
		return "", err
	}
	var ps []projector.Projection
	for _, rp := range projectors {
		p := projector.ProjectionOf(rp.Aggregate(), rp.Apply, nil)
		p.Name = "tx_" + p.Name
		ps = append(ps, p)
	}
	poison, err := projector.SQLPublisher(db.DB, b.log)
	if err != nil {
		return "", err
	}
	router, err := projector.NewRouter(projector.RouterConfig{Subscriber: projector.SQLSubscribers(db.DB, b.log, 10*time.Millisecond), Poison: poison, Log: b.log}, ps...)
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

// backlog is how writeBacklog writes: through store (nil: in clear, the
// bench's transactor), for customers customers of one merchant (streams go
// to each in turn), with notes (when set) in every order and schedule.
type backlog struct {
	store     *pubsub.Store
	customers int
	notes     string
	events    int       // 0: backlogEvents
	endpoint  string    // when set, the merchant gets a webhook endpoint to it first
	occurred  time.Time // the events' occurred_at; zero: now
}

// writeBacklog appends bl.events (or backlogEvents) events: streams of 4 events each,
// a third of them orders, service requests and schedules, 50 streams per
// transaction, from 4 writers.
func writeBacklog(ctx context.Context, db *bun.DB, bl backlog) error {
	merchantID, customerID, err := tenant(ctx, db)
	if err != nil {
		return err
	}
	occurred := cmp.Or(bl.occurred, time.Now())
	if bl.endpoint != "" { // created before the events
		if _, err := db.ExecContext(ctx, `INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, now())`, uuid.New(), merchantID, bl.endpoint, webhook.NewSecret(), occurred.Add(-time.Minute)); err != nil {
			return err
		}
	}
	customers := []string{customerID}
	if bl.customers > 1 {
		rows, err := db.QueryContext(ctx, `INSERT INTO customers (id, merchant_id, name)
			SELECT gen_random_uuid(), ?, 'Customer ' || g FROM generate_series(2, ?) g RETURNING id`, merchantID, bl.customers)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			customers = append(customers, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	store := bl.store
	if store == nil {
		if store, err = pubsub.NewStore(db, nil, nil); err != nil {
			return err
		}
	}
	tx, err := pubsub.NewTransactor(store)
	if err != nil {
		return err
	}
	meta := event.Meta{MerchantID: merchantID, Actor: "bench", CorrelationID: uuid.New(), OccurredAt: occurred}
	streams := cmp.Or(bl.events, backlogEvents) / 4
	const perTx, writers = 50, 4
	g, ctx := errgroup.WithContext(ctx)
	for w := range writers {
		g.Go(func() error {
			for first := w * perTx; first < streams; first += writers * perTx {
				_, err := tx.Run(ctx, meta, func(ctx context.Context, s command.Session) error {
					for i := first; i < min(first+perTx, streams); i++ {
						if err := addBacklogStream(s, i, customers[i%len(customers)], bl.notes); err != nil {
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

// addBacklogStream adds stream i to s: an aggregate of the customer
// created and changed three times.
func addBacklogStream(s command.Session, i int, customerID, notes string) error {
	id := uuid.New()
	switch i % 3 {
	case 0:
		o, err := order.New(order.NewOrder{ID: id, CustomerID: customerID, AmountCents: 100, Notes: notes})
		if err != nil {
			return err
		}
		for k := range 3 {
			if err := o.UpdateDetails(order.Details{CustomerID: customerID, AmountCents: int64(200 + k), Notes: notes}); err != nil {
				return err
			}
		}
		s.AddOrder(o)
	case 1:
		r, err := servicerequest.New(id, customerID, servicerequest.Sources[0], servicerequest.Details{Content: "leaking tap"})
		if err != nil {
			return err
		}
		for k := range 3 {
			if err := r.UpdateDetails(servicerequest.Details{Content: "leaking tap, visit " + strconv.Itoa(k)}); err != nil {
				return err
			}
		}
		s.AddServiceRequest(r)
	default:
		start := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
		sch, err := schedule.New(id, uuid.New(), customerID, schedule.Window{StaffID: uuid.New(), StartAt: start, EndAt: start.Add(time.Hour)}, notes)
		if err != nil {
			return err
		}
		for k := range 3 {
			at := start.Add(time.Duration(k+1) * 24 * time.Hour)
			if err := sch.Reassign(schedule.Window{StaffID: uuid.New(), StartAt: at, EndAt: at.Add(time.Hour)}); err != nil {
				return err
			}
		}
		s.AddSchedule(sch)
	}
	return nil
}
