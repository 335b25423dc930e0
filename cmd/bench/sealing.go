package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/vault"
	"hearth/app/access"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
	"hearth/internal/keyring"
	"hearth/internal/refdata"
	"hearth/migrations"
)

// The sealing runs: what sealing personal fields costs, beside a Hearth
// with PERSONAL_DATA_SEALING=off in the same run.
var (
	sealingRounds   = 4               // turns of each process in the CPU run
	sealingTurn     = 5 * time.Second // each turn of each process
	erasureOrders   = 1000            // orders of the customer erased
	sealingNotes    = "call Mrs Patel before 9, key under the mat"
	backlogCustomer = 40 // events per customer in the sealed and clear backlogs
)

// sealing runs the three sealing measures and returns their rows.
func (b *bench) sealing(ctx context.Context) ([]row, error) {
	cpu, err := b.sealingCPU(ctx)
	if err != nil {
		return nil, fmt.Errorf("CPU per request: %w", err)
	}
	catchUp, err := b.sealingCatchUp(ctx)
	if err != nil {
		return nil, fmt.Errorf("catch-up: %w", err)
	}
	erase, err := b.erasure(ctx)
	if err != nil {
		return nil, fmt.Errorf("erasure: %w", err)
	}
	return []row{cpu, catchUp, erase}, nil
}

// sealingCPU: POST /v1/orders with notes (a personal field) at concurrency
// 16 to two Hearth processes in mode api on one database, one sealing and
// one with PERSONAL_DATA_SEALING=off, taking turns (which one goes first
// alternates), as the commands row measures Hearth: CPU from /proc over
// each turn, divided by the requests that succeeded. One customer: its
// data key stays cached (vault.CacheFor), so this is the cost of sealing
// itself, with a key lookup every few seconds.
func (b *bench) sealingCPU(ctx context.Context) (row, error) {
	es, url, key, customerID, err := b.operatorDB(ctx, "sealing")
	if err != nil {
		return row{}, err
	}
	defer es.Close()
	request := postOrderRequest(key.Secret, customerID)

	sealed, sealedBase, err := b.start(ctx, hearthRun{name: "sealing, on", url: url, mode: "api"})
	if err != nil {
		return row{}, err
	}
	defer b.stopHearth(sealed)
	clear, clearBase, err := b.start(ctx, hearthRun{name: "sealing, off", url: url, mode: "api", env: []string{"PERSONAL_DATA_SEALING=off"}})
	if err != nil {
		return row{}, err
	}
	defer b.stopHearth(clear)
	// The warm-up turns cache the data key too.
	onRun, offRun := &contender{base: sealedBase, pid: sealed.Process.Pid}, &contender{base: clearBase, pid: clear.Process.Pid}
	b.alternate("sealing", request, sealingRounds, sealingTurn, onRun, offRun)
	on, off, turnsOn, turnsOff := onRun.total, offRun.total, onRun.turns, offRun.turns
	b.sampleRSS(sealed)
	b.sampleRSS(clear)
	// Both wrote: the sealing one's notes must be sealed, the other's not.
	var inClear int
	if err := es.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE data->>'notes' = ?`, sealingNotes).Scan(&inClear); err != nil {
		return row{}, err
	}
	if inClear < len(off.lat) { // the warm-up's too
		return row{}, fmt.Errorf("%d orders have their notes in clear, but the process without sealing created %d", inClear, len(off.lat))
	}
	onCPU, offCPU := on.cpu.per(float64(len(on.lat))), off.cpu.per(float64(len(off.lat)))
	return row{
		fmt.Sprintf("CPU per POST /v1/orders with notes, mode api, concurrency %d, %d turns of %s each (sealed / in clear)", concurrency, sealingRounds, sealingTurn),
		fmt.Sprintf("%s; %s", onCPU, on), fmt.Sprintf("%s; %s", offCPU, off),
		fmt.Sprintf("**Hearth's CPU per request %s with sealing** (target at most +10 %%); Hearth and Postgres together %s. "+
			"Plain: the same binary with PERSONAL_DATA_SEALING=off, the two taking turns on one database. Hearth µs per request by turn: sealed %s, in clear %s",
			change(onCPU.process, offCPU.process), change(onCPU.process+onCPU.postgres, offCPU.process+offCPU.postgres),
			strings.Join(turnsOn, ", "), strings.Join(turnsOff, ", ")),
	}, nil
}

// operatorDB creates a database with both migration sets, an operator key
// of a new merchant and a customer of that merchant.
func (b *bench) operatorDB(ctx context.Context, name string) (*bun.DB, string, refdata.NewKey, string, error) {
	var key refdata.NewKey
	es, url, err := b.newDB(ctx, name, migrations.EventStore, migrations.ReadModel)
	if err != nil {
		return nil, "", key, "", err
	}
	ref, err := refdata.New(es)
	if err == nil {
		key, err = ref.CreateKey(ctx, "bench-"+name, access.Operator, "")
	}
	customerID := uuid.New()
	if err == nil {
		_, err = es.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, customerID, key.MerchantID)
	}
	if err != nil {
		es.Close()
		return nil, "", key, "", err
	}
	return es, url, key, customerID, nil
}

// postOrderRequest is a POST /v1/orders of the customer with notes, as
// bytes for postOrders.
func postOrderRequest(secret, customerID string) []byte {
	body, _ := json.Marshal(map[string]any{"customer_id": customerID, "amount_cents": 12000, "notes": sealingNotes})
	return []byte(fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: hearth\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", secret, len(body), body))
}

// change is a as a change from reference, in per cent.
func change(a, reference float64) string {
	if reference == 0 {
		return "(no figure)"
	}
	return fmt.Sprintf("%+.1f %%", 100*(a-reference)/reference)
}

// sealingCatchUp: backlogs of backlogEvents events, alike but for sealing
// (notes in every order and schedule, a customer per backlogCustomer
// events), each caught up by a fresh Hearth in mode all, in turns (clear,
// sealed, sealed, clear) so that the host's drift weighs on both alike.
func (b *bench) sealingCatchUp(ctx context.Context) (row, error) {
	ring, err := keyring.Parse(benchMasterKey)
	if err != nil {
		return row{}, err
	}
	took, cpu := map[bool]time.Duration{}, map[bool]float64{}
	turns := map[bool][]string{}
	rate := func(d time.Duration, turns int) float64 { return float64(turns*backlogEvents) / d.Seconds() }
	for i, sealed := range []bool{false, true, true, false} {
		name := map[bool]string{false: "clear", true: "sealed"}[sealed]
		dbName := fmt.Sprintf("backlog_%s_%d", name, i)
		db, url, err := b.newDB(ctx, dbName, migrations.EventStore, migrations.ReadModel)
		if err != nil {
			return row{}, err
		}
		defer db.Close()
		bl := backlog{customers: backlogEvents / backlogCustomer, notes: sealingNotes}
		if sealed {
			v, err := vault.New(db.DB, ring)
			if err != nil {
				return row{}, err
			}
			if bl.store, err = pubsub.NewStore(db, nil, v); err != nil {
				return row{}, err
			}
		}
		b.progress("sealing: writing a backlog of %d events, %s, for %d customers", backlogEvents, name, bl.customers)
		if err := writeBacklog(ctx, db, bl); err != nil {
			return row{}, err
		}
		if err := checkSealed(ctx, db, sealed); err != nil {
			return row{}, err
		}
		// Every turn starts alike: its backlog vacuumed and analysed after a
		// checkpoint, and no earlier turn's database left for autovacuum
		// to work on meanwhile (the first turn had none, and was faster).
		if err := b.settle(ctx, db); err != nil {
			return row{}, err
		}
		b.progress("sealing: catch-up of the %s backlog by a fresh Hearth", name)
		t, spent, err := b.hearthCatchUp(ctx, db, url, "catch-up, "+name)
		if err != nil {
			return row{}, err
		}
		if err := b.dropDB(ctx, db, dbName); err != nil {
			return row{}, err
		}
		took[sealed] += t
		cpu[sealed] += spent.per(float64(backlogEvents)).process / 2
		turns[sealed] = append(turns[sealed], fmt.Sprintf("%.0f", rate(t, 1)))
	}
	return row{
		fmt.Sprintf("catch-up of %d events with personal fields, %d customers, 2 turns each (sealed / in clear)", backlogEvents, backlogEvents/backlogCustomer),
		fmt.Sprintf("%.0f events/s (%.1f s a turn from process start); Hearth %.0f µs CPU per event", rate(took[true], 2), took[true].Seconds()/2, cpu[true]),
		fmt.Sprintf("%.0f events/s (%.1f s a turn); Hearth %.0f µs CPU per event", rate(took[false], 2), took[false].Seconds()/2, cpu[false]),
		fmt.Sprintf("**%s of the rate in clear** (target at least 90 %%); Hearth's CPU per event %s (start-up included; steadier than the rate "+
			"on a shared machine). Plain: the same backlog written in clear, caught up by the same binary, in turns with it (events/s by turn: "+
			"sealed %s, in clear %s; each turn on its own backlog, vacuumed, after a checkpoint); notes in every order and schedule, content in every service request",
			percentOf(rate(took[true], 2), rate(took[false], 2)), change(cpu[true], cpu[false]),
			strings.Join(turns[true], ", "), strings.Join(turns[false], ", ")),
	}, nil
}

// checkSealed fails unless the backlog's orders hold their notes sealed
// (sealed) or in clear.
func checkSealed(ctx context.Context, db *bun.DB, sealed bool) error {
	var inClear, orders int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE data->'notes' IS NOT NULL), count(*) FROM events WHERE stream_type = 'order'`).
		Scan(&inClear, &orders); err != nil {
		return err
	}
	if want := map[bool]int{false: orders, true: 0}[sealed]; inClear != want {
		return fmt.Errorf("backlog (sealed %t): %d of %d order events hold their notes in clear", sealed, inClear, orders)
	}
	return nil
}

// erasure: a customer with erasureOrders orders (created through the API,
// with notes) is erased through the API by a Hearth in mode all; the
// figures are the erase call (which waits vault.CacheFor between its two
// passes) and the time from the call until GET /v1/orders?min_position=
// reports the read models reached its position.
func (b *bench) erasure(ctx context.Context) (row, error) {
	es, url, key, customerID, err := b.operatorDB(ctx, "erasure")
	if err != nil {
		return row{}, err
	}
	defer es.Close()
	cmd, base, err := b.startHearth(ctx, "erasure, mode all", url, "all")
	if err != nil {
		return row{}, err
	}
	defer b.stopHearth(cmd)
	b.progress("erasure: creating %d orders of one customer", erasureOrders)
	created := postOrders(base, cmd.Process.Pid, postOrderRequest(key.Secret, customerID), 0, 10, erasureOrders) // 10 clients: erasureOrders/10 each
	if created.failures > 0 || len(created.lat) != erasureOrders {
		return row{}, fmt.Errorf("created %d of %d orders (%d failed, the first: %v)", len(created.lat), erasureOrders, created.failures, created.firstErr)
	}
	orders := []projector.Projection{projector.ProjectionOf(aggregates.Order.Facts, nil, nil)} // the one topic written
	if err := waitConsumed(ctx, es, orders, time.Now(), time.Minute, func() {}); err != nil {
		return row{}, err
	}

	b.progress("erasure: erasing the customer")
	start := time.Now()
	var answer struct {
		Aggregates int   `json:"aggregates"`
		Position   int64 `json:"position"`
	}
	if err := call(ctx, http.MethodPost, base+"/v1/customers/"+customerID+"/erase", key.Secret,
		map[string]string{"confirm": customerID}, &answer); err != nil {
		return row{}, err
	}
	called := time.Since(start)
	if answer.Aggregates != erasureOrders {
		return row{}, fmt.Errorf("the erasure marked %d aggregates, not %d", answer.Aggregates, erasureOrders)
	}
	for {
		status, err := consistencyStatus(ctx, base+"/v1/orders?page_size=1&min_position="+strconv.FormatInt(answer.Position, 10), key.Secret)
		if err != nil {
			return row{}, err
		}
		if status == "reached" {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return row{}, fmt.Errorf("the read models did not reach the erasure's position in 2 minutes (Consistency-Status: %s)", status)
		}
	}
	projected := time.Since(start)
	b.sampleRSS(cmd)
	var left int
	if err := es.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE customer_id = ? AND erased = '{}'`, customerID).Scan(&left); err != nil {
		return row{}, err
	}
	if left != 0 {
		return row{}, fmt.Errorf("the read models reached the erasure's position with %d orders not erased", left)
	}
	return row{
		fmt.Sprintf("erasure of a customer with %d orders, through the API (call / until the read models show it)", erasureOrders),
		fmt.Sprintf("%.1f s / %.1f s", called.Seconds(), projected.Seconds()), "",
		fmt.Sprintf("the call includes its wait of %s (vault.CacheFor) between its two passes; "+
			"then GET /v1/orders?min_position= until Consistency-Status: reached, every order then erased in the read model", vault.CacheFor),
	}, nil
}

// call sends a JSON request with the key and decodes a 2xx answer into
// out.
func call(ctx context.Context, method, url, secret string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(string(data)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		var problem json.RawMessage
		_ = json.NewDecoder(res.Body).Decode(&problem)
		return fmt.Errorf("%s %s: status %d: %s", method, url, res.StatusCode, problem)
	}
	return json.NewDecoder(res.Body).Decode(out)
}

// consistencyStatus GETs url with the key and returns its
// Consistency-Status.
func consistencyStatus(ctx context.Context, url, secret string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: status %d", url, res.StatusCode)
	}
	return res.Header.Get("Consistency-Status"), nil
}
