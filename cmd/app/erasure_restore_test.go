package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/internal/advisory"
	"hearth/internal/pgtest"
	"hearth/leader"
)

// backup takes a logical backup of the database at url (pg_dump's custom
// format), as an operator's nightly job does, and returns its file.
func backup(t *testing.T, url string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "hearth.dump")
	out, err := exec.CommandContext(t.Context(), "pg_dump", "--format=custom", "--file="+file, "--dbname="+url).CombinedOutput()
	require.NoError(t, err, "pg_dump: %s", out)
	return file
}

// restoreBackup restores file into a new, empty database, as an operator
// restores a backup after losing the database, and returns its URL.
func restoreBackup(t *testing.T, file string) string {
	t.Helper()
	url := pgtest.NewEmptyDB(t)
	out, err := exec.CommandContext(t.Context(), "pg_restore", "--exit-on-error", "--no-owner", "--dbname="+url, file).CombinedOutput()
	require.NoError(t, err, "pg_restore: %s", out)
	return url
}

// eraseCLI erases a customer of merchant acme with the CLI.
func eraseCLI(t *testing.T, urls pgtest.URLs, customer string) {
	t.Helper()
	out, err := cli(t.Context(), urls, "customers", "erase", "--merchant", "acme", customer, "--confirm", customer)
	require.NoError(t, err, out)
	require.Contains(t, out, "second pass done")
}

// customerName is the name the event store holds for a customer, and
// whether it is recorded erased.
func customerName(t *testing.T, db *sql.DB, id string) (name string, erased bool) {
	t.Helper()
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT c.name, EXISTS (SELECT 1 FROM erased_subjects e WHERE e.subject_id = c.id)
		FROM customers c WHERE c.id = $1`, id).Scan(&name, &erased))
	return name, erased
}

// A person erased after a backup was taken comes back when that backup is
// restored: the restored erased_subjects is the backup's, so erasing again
// "every subject in erased_subjects" (the runbook's step) cannot find them.
// The operator keeps `app erasures export` (ids, no personal data) beside
// the backups, and `app erasures apply` erases again, in the restored
// database, every subject it lists that is there: once, however often it
// runs, and the read models then forget the text too.
func TestAnErasureAfterTheBackupIsErasedAgainAfterTheRestore(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	early := a.createCustomer(a.opA, "Early Erased")
	ada := a.createCustomer(a.opA, "Ada Lovelace")
	order := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
		map[string]any{"customer_id": ada, "amount_cents": 1200, "notes": "Ada's door code 4711"}).Body["id"].(string)
	a.awaitOrder(a.opA, order, 1)
	eraseCLI(t, a.urls(), early)

	dump := backup(t, a.urls().EventStore)

	eraseCLI(t, a.urls(), ada)
	late := a.createCustomer(a.opA, "Late Customer") // created and erased after the backup
	eraseCLI(t, a.urls(), late)
	exported, err := cli(ctx, a.urls(), "erasures", "export")
	require.NoError(t, err, exported)
	require.NotContains(t, exported, "Ada", "ids only")
	var doc struct {
		Schema   string           `json:"schema"`
		Erasures []map[string]any `json:"erasures"`
	}
	require.NoError(t, json.Unmarshal([]byte(exported), &doc), exported)
	require.Equal(t, "hearth.erasures/1", doc.Schema)
	require.Len(t, doc.Erasures, 3, exported)
	file := filepath.Join(t.TempDir(), "erasures.json")
	require.NoError(t, os.WriteFile(file, []byte(exported), 0o600))

	url := restoreBackup(t, dump)
	restored := pgtest.URLs{EventStore: url, ReadModel: url}
	db := pgtest.Open(t, url).DB
	name, erased := customerName(t, db, ada)
	require.Equal(t, "Ada Lovelace", name, "the restore brings back a person erased after the backup")
	require.False(t, erased, "the restored erased_subjects is the backup's")

	out, err := cli(ctx, restored, "erasures", "apply", file, "--by", "ops: restore 12")
	require.NoError(t, err, out)
	require.Contains(t, out, "1 erased again, 1 already erased, 1 not in this database", out)
	name, erased = customerName(t, db, ada)
	require.Empty(t, name)
	require.True(t, erased)
	var keys, audits int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM data_keys WHERE subject_id = $1`, ada).Scan(&keys))
	require.Zero(t, keys, "the data key is deleted: the sealed text no longer opens")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM admin_audit WHERE actor = 'ops: restore 12' AND target = $1`,
		"customer/"+ada).Scan(&audits))
	require.Equal(t, 2, audits, "both passes of the erasure are in the audit log, under --by")
	var pending int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM erasure_second_passes`).Scan(&pending))
	require.Zero(t, pending, "the second passes ran: the erasures are complete")

	var events int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM events`).Scan(&events))
	out, err = cli(ctx, restored, "erasures", "apply", file)
	require.NoError(t, err, out)
	require.Contains(t, out, "0 erased again, 2 already erased, 1 not in this database", out)
	var again int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM events`).Scan(&again))
	require.Equal(t, events, again, "applying again appends nothing")

	// Hearth started on the restored database: the projections apply the
	// erasure, and the order shows its notes erased.
	b := setup(t, restored)
	o := b.awaitOrder(b.opA, order, 2)
	require.Nil(t, o.Body["notes"], o.String())
	require.NotContains(t, o.Raw, "4711")
	c := b.must(http.StatusOK, http.MethodGet, "/v1/customers/"+ada, b.opA, nil)
	require.NotNil(t, c.Body["erased_at"], c.String())
}

// `app erasures apply` refuses a file it cannot trust, naming the entry
// and the field, and then erases nothing: not the file of erasures
// (schema), an entry whose id is not a UUID or whose subject type is
// unknown, and a subject this database holds under another merchant or as
// another type (the file of another deployment).
func TestErasuresApplyRefusesBadInput(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ada := a.createCustomer(a.opA, "Ada Lovelace")
	bob := a.createCustomer(a.opB, "Bob Globex")
	dir := t.TempDir()
	apply := func(content string) (string, error) {
		file := filepath.Join(dir, uuid.New()+".json")
		require.NoError(t, os.WriteFile(file, []byte(content), 0o600))
		return cli(t.Context(), a.urls(), "erasures", "apply", file)
	}
	entry := func(typ, id, merchant string) string {
		return `{"subject_type":"` + typ + `","subject_id":"` + id + `","merchant_id":"` + merchant + `","erased_at":"2030-01-01T00:00:00Z"}`
	}
	doc := func(entries ...string) string {
		return `{"schema":"hearth.erasures/1","exported_at":"2030-01-02T00:00:00Z","erasures":[` + strings.Join(entries, ",") + `]}`
	}
	good := entry("customer", ada, a.merchantA)
	for name, c := range map[string]struct{ content, want string }{
		"not json":           {"Ada Lovelace", "erasures apply: read " + dir},
		"another schema":     {`{"schema":"hearth.customer-export/1","erasures":[]}`, `schema: must be "hearth.erasures/1", got "hearth.customer-export/1"`},
		"an unknown field":   {`{"schema":"hearth.erasures/1","erasures":[],"name":"x"}`, `unknown field "name"`},
		"a name for an id":   {doc(good, entry("customer", "Bob Globex", a.merchantB)), `erasures[1].subject_id: must be a UUID, got "Bob Globex"`},
		"an unknown type":    {doc(good, entry("person", bob, a.merchantB)), `erasures[1].subject_type: must be customer or staff_member, got "person"`},
		"another merchant":   {doc(good, entry("customer", bob, a.merchantA)), "erasures[1]: this database holds customer " + bob + " under merchant " + a.merchantB + ", not " + a.merchantA},
		"another type":       {doc(good, entry("staff_member", bob, a.merchantB)), "erasures[1]: this database holds " + bob + " as a customer, not a staff_member"},
		"trailing data":      {doc(good) + "{}", "after the document"},
		"no merchant":        {doc(entry("customer", ada, "")), `erasures[0].merchant_id: must be a UUID, got ""`},
		"a merchant missing": {doc(`{"subject_type":"customer","subject_id":"` + ada + `"}`), `erasures[0].merchant_id: must be a UUID, got ""`},
	} {
		out, err := apply(c.content)
		require.Error(t, err, "%s: %s", name, out)
		require.Contains(t, err.Error(), c.want, name)
	}
	name, erased := customerName(t, a.dbs.es.DB, ada)
	require.Equal(t, "Ada Lovelace", name, "a file refused erases nobody, not even its good entries")
	require.False(t, erased)

	out, err := cli(t.Context(), a.urls(), "erasures", "apply")
	require.Error(t, err, out)
	require.Contains(t, err.Error(), "erasures apply: FILE")
	require.ErrorAs(t, err, new(usageError))
}

// A logical backup restored into another Postgres server (pg_restore into
// a new cluster: a lost server, a move) carries the transaction ids the
// old server gave the events, and the consumers' offsets name them; the
// new server's transaction counter starts over, below them. Watermill's
// subscribers read only after their offset, so every event written on the
// new server would be skipped by the projections (and the webhook fan-out
// and the relay) without a word. Hearth must not start on such a database
// (the error names what to do), and once the counter is advanced as the
// runbook says, a write after the restore reaches the read models.
func TestALogicalRestoreIntoAnotherServerDoesNotSkipNewEvents(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	ada := a.createCustomer(a.opA, "Ada Lovelace")
	before := a.createOrder(a.opA, ada, 1000)
	a.awaitOrder(a.opA, before, 1)
	// The old server's counter well past where a new one starts (a test
	// cluster is young; a production server is far older).
	_, err := a.dbs.es.DB.ExecContext(ctx, `DO $$ BEGIN FOR i IN 1..20000 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$`)
	require.NoError(t, err)
	after := a.createOrder(a.opA, ada, 1100) // the last write before the backup
	a.awaitOrder(a.opA, after, 1)
	dump := backup(t, a.urls().EventStore)

	server := pgtest.StartCluster(t)
	admin, err := sql.Open("pgx", server.URL("postgres"))
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.ExecContext(ctx, `CREATE DATABASE restored`)
	require.NoError(t, err)
	url := server.URL("restored")
	out, err := exec.CommandContext(ctx, "pg_restore", "--exit-on-error", "--no-owner", "--dbname="+url, dump).CombinedOutput()
	require.NoError(t, err, "pg_restore: %s", out)
	restored := pgtest.URLs{EventStore: url, ReadModel: url}

	out2, err := cli(ctx, restored, "migrate")
	require.Error(t, err, "Hearth must not start on a database whose events are past the server's transaction counter: %s", out2)
	require.Contains(t, err.Error(), "transaction counter")
	require.Contains(t, err.Error(), "operations.md#restoring-into-another-server")

	// The runbook's step, as it is written: advance the counter past the
	// id the error names, with a margin (here 1000).
	var last, target string
	db := pgtest.Open(t, url).DB
	require.NoError(t, db.QueryRowContext(ctx, `SELECT max(transaction_id)::text, (max(transaction_id)::text::bigint + 1000)::text FROM events`).Scan(&last, &target))
	require.Contains(t, err.Error(), "transaction ids up to "+last)
	_, err = db.ExecContext(ctx, `DO $$ BEGIN WHILE pg_current_xact_id() < '`+target+`'::xid8 LOOP COMMIT; END LOOP; END $$`)
	require.NoError(t, err)
	out2, err = cli(ctx, restored, "migrate")
	require.NoError(t, err, out2)

	b := setup(t, restored)
	o := b.createOrder(b.opA, ada, 1200)
	b.awaitOrder(b.opA, o, 1)
	b.awaitOrder(b.opA, after, 1)
}

// In the two-database layout, a read model restored alone from its backup
// is behind the event store, whose consumer offsets say the projections
// applied everything: an aggregate written since the backup keeps its old
// row (or has none), and neither `app parked replay` nor `app rebuild`
// (which follows the change log) mends it. The runbook rewinds the
// projections' offsets, and the read models catch up with every event.
func TestAReadModelRestoredAloneCatchesUpOnceTheProjectionsAreRewound(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	ctx := t.Context()
	var ada, o1, o3, dump string
	// Hearth runs, then every instance stops (the subtest's end) before the
	// restore, as the runbook says.
	dir := t.TempDir() // the backup outlives the subtest
	t.Run("before the loss", func(t *testing.T) {
		a := setup(t, urls)
		ada = a.createCustomer(a.opA, "Ada")
		o1 = a.createOrder(a.opA, ada, 1000)
		a.awaitOrder(a.opA, o1, 1)
		dump = backup(t, urls.ReadModel)
		require.NoError(t, os.Rename(dump, filepath.Join(dir, "rm.dump")))
		dump = filepath.Join(dir, "rm.dump")
		a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+o1+"/status", a.opA, map[string]any{"status": "confirmed"})
		o3 = a.createOrder(a.opA, ada, 3000)
		a.awaitOrder(a.opA, o1, 2)
		a.awaitOrder(a.opA, o3, 1)
	})

	restored := pgtest.URLs{EventStore: urls.EventStore, ReadModel: restoreBackup(t, dump)}
	out, err := cli(ctx, restored, "verify", "--recheck", "0")
	require.Error(t, err, "the restored read model is behind: %s", out)
	out, err = cli(ctx, restored, "projections", "rewind", "--by", "ops: restore 12")
	require.NoError(t, err, out)
	require.Contains(t, out, "rewound orders", out)

	b := setup(t, restored)
	require.Equal(t, "confirmed", b.awaitOrder(b.opA, o1, 2).Body["status"])
	b.awaitOrder(b.opA, o3, 1)
	require.Eventually(t, func() bool {
		_, err := cli(ctx, restored, "verify", "--recheck", "0")
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the read models agree with the event store, change log included")
}

// In the two-database layout, an event store restored from its backup
// beside a read model kept as it was: the read model's rows stand at
// versions the event store lost, and the events written at those versions
// from then on are taken for ones already applied and dropped, without a
// word. Hearth must not start on such a pair; restored as the runbook
// says (the read model's backup, taken before the event store's, and the
// projections rewound), a write after the restore reaches the read model.
func TestAnEventStoreRestoredBehindItsReadModelIsRefused(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	ctx := t.Context()
	var o1, rmDump, esDump string
	dir := t.TempDir() // the backups outlive the subtest
	t.Run("before the loss", func(t *testing.T) {
		a := setup(t, urls)
		ada := a.createCustomer(a.opA, "Ada")
		o1 = a.createOrder(a.opA, ada, 1000)
		a.awaitOrder(a.opA, o1, 1)
		rmDump, esDump = filepath.Join(dir, "rm.dump"), filepath.Join(dir, "es.dump")
		require.NoError(t, os.Rename(backup(t, urls.ReadModel), rmDump))
		require.NoError(t, os.Rename(backup(t, urls.EventStore), esDump))
		// Written after the backups: lost with the event store.
		a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+o1+"/status", a.opA, map[string]any{"status": "confirmed"})
		a.awaitOrder(a.opA, o1, 2)
	})

	es := restoreBackup(t, esDump)
	out, err := cli(ctx, pgtest.URLs{EventStore: es, ReadModel: urls.ReadModel}, "migrate")
	require.Error(t, err, "the read model holds events the restored event store lost: %s", out)
	require.Contains(t, err.Error(), "operations.md#restoring-the-read-model-two-databases")

	restored := pgtest.URLs{EventStore: es, ReadModel: restoreBackup(t, rmDump)}
	out, err = cli(ctx, restored, "projections", "rewind")
	require.NoError(t, err, out)
	b := setup(t, restored)
	require.Equal(t, "pending", b.awaitOrder(b.opA, o1, 1).Body["status"], "the event store's state")
	b.must(http.StatusOK, http.MethodPost, "/v1/orders/"+o1+"/cancel", b.opA, map[string]any{"reason": "restored"})
	require.Equal(t, "cancelled", b.awaitOrder(b.opA, o1, 2).Body["status"], "the write after the restore, at the version the lost one had")
}

// `app projections rewind` refuses while a worker runs (a leader keeps its
// position in memory and would write it back; a standby would lead at
// once), and rewinds nothing then; once the worker stops, it rewinds.
func TestProjectionsRewindRefusesWhileAnInstanceRuns(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	a := setup(t, urls) // setup runs its projections without leadership, as a test instance
	o := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 1000)
	a.awaitOrder(a.opA, o, 1)
	p := newWorker(t, urls, "solo")
	stop := p.run(t)
	require.Eventually(t, func() bool { return p.unit("orders").Role == leader.RoleLeader }, 10*time.Second, 10*time.Millisecond)
	offsets := func() string {
		var s string
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT string_agg(consumer_group || ':' || last_processed_transaction_id::text || ':' || offset_acked, ',' ORDER BY consumer_group)
			FROM watermill_offsets_orders`).Scan(&s))
		return s
	}
	audits := func() int {
		var n int
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM admin_audit WHERE action = 'projections.rewind'`).Scan(&n))
		return n
	}
	before := offsets()
	out, err := cli(t.Context(), a.urls(), "projections", "rewind")
	require.Error(t, err, out)
	require.Contains(t, err.Error(), "stop every instance")
	require.Equal(t, before, offsets(), "nothing rewound")
	require.Zero(t, audits())

	stop()
	out, err = cli(t.Context(), a.urls(), "projections", "rewind", "--by", "ops: restore 12")
	require.NoError(t, err, out)
	require.Contains(t, out, "rewound orders to (transaction 0, offset 0) of orders")
	require.Equal(t, 1, audits())
}

// webhookWorker is a worker that runs webhook delivery too, as serve's
// scheduler does.
func webhookWorker(t *testing.T, urls pgtest.URLs) *worker {
	t.Helper()
	p := newWorker(t, urls, "solo")
	var err error
	p.sched, err = newScheduler(p.cfg, p.dbs, p.w, p.log, webhookUnit(p.cfg, p.w, p.log))
	require.NoError(t, err)
	return p
}

// webhookTerm is the term p leads webhook delivery under, 0 when it does
// not lead it.
func (p *worker) webhookTerm() int64 {
	for _, u := range p.sched.Status().Units {
		if u.Name == advisory.Webhooks && u.Role == leader.RoleLeader {
			return u.Term
		}
	}
	return 0
}

// deliversWebhooks reports whether p leads webhook delivery under the term
// the event store holds: the one its writes there are fenced with (a term
// the event store refused ends at once, and the unit rests).
func (p *worker) deliversWebhooks(t *testing.T, es *sql.DB) func() bool {
	return func() bool {
		var current int64
		if es.QueryRowContext(t.Context(), `SELECT term FROM event_store_terms WHERE name = $1`, advisory.Webhooks).Scan(&current) != nil {
			return false
		}
		term := p.webhookTerm()
		return term != 0 && term == current
	}
}

// The leadership terms live in the read model, and webhook delivery's is
// copied to the event store (event_store_terms), which fences its writes
// there. A read model restored from its backup has the terms of the
// backup's day; takeovers since moved the event store's copy on, and each
// new term began from the read model's is refused as stale: the unit rests
// and tries again, one term at a time, while no webhook is delivered. The
// rewind after the restore brings the read model's terms up to the event
// store's, and the worker leads webhook delivery at once.
func TestWebhookDeliveryLeadsAtOnceAfterTheReadModelIsRestored(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	ctx := t.Context()
	dir := t.TempDir()
	dump := filepath.Join(dir, "rm.dump")
	t.Run("before the loss", func(t *testing.T) {
		p := webhookWorker(t, urls)
		p.run(t)
		require.Eventually(t, p.deliversWebhooks(t, pgtest.Open(t, urls.EventStore).DB), 10*time.Second, 10*time.Millisecond)
		require.NoError(t, os.Rename(backup(t, urls.ReadModel), dump))
	})
	// Takeovers after the backup (workers restarted, failovers) moved the
	// event store's copy of the term on.
	res, err := pgtest.Open(t, urls.EventStore).DB.ExecContext(ctx, `UPDATE event_store_terms SET term = term + 50 WHERE name = $1`, advisory.Webhooks)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "webhook delivery's term is in the event store")

	restored := pgtest.URLs{EventStore: urls.EventStore, ReadModel: restoreBackup(t, dump)}
	out, err := cli(ctx, restored, "projections", "rewind")
	require.NoError(t, err, out)
	p := webhookWorker(t, restored)
	p.run(t)
	require.Eventually(t, p.deliversWebhooks(t, pgtest.Open(t, urls.EventStore).DB), 10*time.Second, 10*time.Millisecond,
		"webhook delivery led under the event store's term after the restore")
}

// `app erasures export` runs from a timer beside the backups (the
// runbook): it reads ids only, so it needs no MASTER_KEY (the timer's host
// need not hold the keys that open every customer's data), and it changes
// nothing, so a newer binary there never migrates the databases at a time
// nobody chose. On a database it cannot read (not migrated) it says so.
func TestErasuresExportNeedsNoMasterKeyAndMigratesNothing(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	erased := a.createCustomer(a.opA, "Erased")
	eraseCLI(t, a.urls(), erased)
	export := func(url string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"erasures", "export"}, env(map[string]string{"DATABASE_URL": url, "LOG_LEVEL": "warn"}), &stdout, &stderr)
		return stdout.String(), err
	}
	out, err := export(a.urls().EventStore)
	require.NoError(t, err, "without MASTER_KEY: %s", out)
	require.Contains(t, out, erased)

	fresh := pgtest.NewEmptyDB(t)
	_, err = export(fresh)
	require.Error(t, err)
	require.ErrorContains(t, err, "app migrate")
	var migrated bool
	require.NoError(t, pgtest.Open(t, fresh).DB.QueryRow(`SELECT to_regclass('hearth_migrations') IS NOT NULL`).Scan(&migrated))
	require.False(t, migrated, "the export applied migrations")
}

// A file `app erasures apply` cannot use is refused in the operator's
// words, naming the field: not with encoding/json's description of a Go
// type (the likely slip is the array `app erasures list --json` prints
// instead of the export's object), and a refused file prints no summary
// ("0 erased again, ...") as if the list had been applied.
func TestErasuresApplyRefusesAFileOfAnotherShapeInItsOwnWords(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	dir := t.TempDir()
	apply := func(content string) (string, error) {
		file := filepath.Join(dir, uuid.New()+".json")
		require.NoError(t, os.WriteFile(file, []byte(content), 0o600))
		return cli(t.Context(), urls, "erasures", "apply", file)
	}
	for name, c := range map[string]struct{ content, want string }{
		"the list's array": {`[]`, "must be the object app erasures export writes, not an array"},
		"a string":         {`"hearth.erasures/1"`, "must be the object app erasures export writes, not a string"},
		"a number for an id": {`{"schema":"hearth.erasures/1","erasures":[{"subject_type":"customer","subject_id":5,"merchant_id":"x"}]}`,
			"erasures.subject_id: must be a string, not a number"},
		"an object for the list": {`{"schema":"hearth.erasures/1","erasures":{}}`, "erasures: must be an array, not an object"},
	} {
		out, err := apply(c.content)
		require.Error(t, err, "%s: %s", name, out)
		require.Contains(t, err.Error(), c.want, name)
		require.NotContains(t, err.Error(), "Go ", "%s: no Go type in the operator's message", name)
	}

	out, err := apply(`{"schema":"hearth.erasures/1","erasures":[{"subject_type":"customer","subject_id":"Ada","merchant_id":"x"}]}`)
	require.Error(t, err, out)
	require.Contains(t, err.Error(), `erasures[0].subject_id: must be a UUID, got "Ada"`)
	require.NotContains(t, out, "erased again", "a refused list was not applied: no summary says it was")
}
