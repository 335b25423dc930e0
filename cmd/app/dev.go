package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/access"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/internal/database"
	"hearth/internal/keyring"
	"hearth/internal/natsserver"
	"hearth/internal/pgcluster"
	"hearth/internal/refdata"
)

// devDir holds the throwaway cluster of `app dev`, devNATSDir its
// throwaway NATS server.
const (
	devDir       = ".data/postgres"
	devNATSDir   = ".data/nats"
	devMasterKey = ".data/master.key"
	devLock      = ".data/dev.lock"
)

// dev is `make run`: without DATABASE_URL it starts a fresh throwaway
// cluster under .data/; without RELAY_NATS_URL, a fresh throwaway
// nats-server with JetStream for the relay when nats-server is installed
// (the relay stays off otherwise, as it does in production without
// RELAY_NATS_URL). It creates a demo merchant with an operator key, an admin
// key and a staff member, prints them with a curl example, serves until
// Ctrl-C, and then stops the servers it started.
func dev(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) (err error) {
	throwaway := cfg.DatabaseURL == ""
	if throwaway && cfg.ReadModelDatabaseURL != "" {
		// The throwaway cluster holds both databases: the read model named
		// would be replaced without a word.
		return errors.New("READMODEL_DATABASE_URL is set but DATABASE_URL is not: app dev would start a throwaway Postgres for both " +
			"databases and leave the read model named unused; set DATABASE_URL too, or unset READMODEL_DATABASE_URL")
	}
	if throwaway || cfg.RelayNATSURL == "" && cfg.Mode != ModeAPI {
		// A second run in the same folder would stop this one's Postgres
		// (as it stops one a killed run left) and remove its data and store.
		unlock, err := lockDevFolder(devLock)
		if err != nil {
			return leftByRoot(err)
		}
		defer unlock()
	}
	// Before anything starts: a taken port would otherwise fail only after
	// the cluster started and the banner printed keys and a console address
	// that lead to the other server.
	if err := checkDevPorts(cfg); err != nil {
		return err
	}
	// stopped is a set-up step's error, or nil for a stop asked for
	// (Ctrl-C) while it ran: not a failure, as it is not while the cluster
	// starts nor once Hearth serves; the line says what it was doing.
	stopped := func(err error) error {
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Info("stopped before Hearth was ready", "while", err.Error())
			return nil
		}
		return err
	}
	if throwaway {
		startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		cluster, err := pgcluster.Start(startCtx, pgcluster.Options{Dir: devDir, Fresh: true, Install: true, Log: log})
		cancel()
		if err != nil && ctx.Err() != nil {
			// Ctrl-C during the start: a stop asked for, as it is once Hearth
			// serves, not a failure (Start has stopped what it started).
			log.Info("stopped while the throwaway Postgres was starting", "reason", err)
			return nil
		}
		if err != nil {
			return leftByRoot(fmt.Errorf("throwaway Postgres: %w", err))
		}
		defer func() {
			log.Info("stopping the throwaway Postgres cluster")
			err = errors.Join(err, cluster.Stop())
		}()
		if err := database.CreateDatabase(ctx, cluster.URL("postgres"), "hearth"); err != nil {
			return stopped(err)
		}
		cfg.DatabaseURL = cluster.URL("hearth")
		cfg.ReadModelDatabaseURL = cfg.DatabaseURL
		log.Info("throwaway Postgres started", "url", cfg.DatabaseURL, "dir", devDir)
	}
	keyFile := "" // the throwaway master key's, for the banner
	switch {
	case cfg.MasterKeys == nil && !throwaway:
		// A database of your own outlives this run: a throwaway key would
		// leave what it sealed unreadable at the next.
		return cfg.requireMasterKeys()
	case cfg.MasterKeys == nil:
		ring, err := throwawayMasterKey(devMasterKey)
		if err != nil {
			return leftByRoot(err)
		}
		cfg.MasterKeys = ring
		if keyFile, err = filepath.Abs(devMasterKey); err != nil {
			return err
		}
		log.Info("throwaway master key made: set MASTER_KEY or MASTER_KEY_FILE to keep your own", "file", devMasterKey)
	}
	if err := migrate(ctx, cfg, log); err != nil {
		return stopped(err)
	}
	devNATS := false
	if cfg.RelayNATSURL == "" && cfg.Mode != ModeAPI {
		// startErr, not err: the deferred Stop below reports into dev's own err.
		srv, startErr := natsserver.Start(ctx, natsserver.Options{Dir: devNATSDir, Fresh: true, Log: log})
		switch {
		case errors.Is(startErr, natsserver.ErrNotInstalled):
			log.Info("nats-server is not installed, so the relay to NATS JetStream stays off (apt-get install nats-server, or set RELAY_NATS_URL)")
		case startErr != nil && ctx.Err() != nil:
			log.Info("stopped while the throwaway NATS server was starting", "reason", startErr)
			return nil
		case startErr != nil:
			return leftByRoot(fmt.Errorf("throwaway NATS server: %w", startErr))
		default:
			defer func() {
				log.Info("stopping the throwaway NATS server")
				err = errors.Join(err, srv.Stop())
			}()
			cfg.RelayNATSURL, devNATS = srv.URL(), true
		}
	}
	var until *time.Time
	if !throwaway {
		// A database of your own outlives the run: its keys end with it
		// (revoked at the stop; a run killed outright leaves them to their
		// expiry), rather than a set of admin keys piling up at each run.
		t := time.Now().Add(demoKeysFor)
		until = &t
	}
	demoKeys, err := seedDemo(ctx, cfg, keyFile, stdout, until)
	if err != nil {
		return stopped(err)
	}
	if until != nil {
		defer func() { err = errors.Join(err, revokeDemoKeys(ctx, cfg, demoKeys, log)) }()
	}
	if devNATS {
		fmt.Fprintf(stdout, "Every event is relayed to NATS JetStream at %s: stream %s, subjects %s.<merchant_id>.<type>\n"+
			"(docs/api.md, \"Events on NATS JetStream\", shows how to consume them).\n\n", cfg.RelayNATSURL, cfg.RelayStream, cfg.RelaySubjectPrefix)
	}
	return serve(ctx, cfg, log)
}

// devFolderBusyError is the rule that one `app dev` at a time uses .data/:
// another run holds its lock.
type devFolderBusyError struct {
	lock string
	pid  int // 0 when the holder had not written it yet
}

func (e *devFolderBusyError) Error() string {
	holder := "another app dev (make run)"
	if e.pid != 0 {
		holder += fmt.Sprintf(" (pid %d)", e.pid)
	}
	return holder + " is using " + filepath.Dir(e.lock) + "/ in this folder: a second one would stop its Postgres and remove its data. " +
		"Stop it first (Ctrl-C in its terminal), or run this one from another folder, or with DATABASE_URL and RELAY_NATS_URL set"
}

// lockDevFolder takes the lock of .data/ for this process, or returns a
// *devFolderBusyError when another live process holds it. The lock is the
// kernel's (flock), so a run killed with SIGKILL leaves none behind, and the
// next run goes on to stop the servers it left. The holder's pid is written
// in the file for the message.
func lockDevFolder(file string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, fmt.Errorf("lock data folder: %w", err)
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data folder: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := io.ReadAll(f)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, &devFolderBusyError{lock: file, pid: pid}
		}
		return nil, fmt.Errorf("lock data folder: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock data folder: %w", err)
	}
	return func() { _ = f.Close() }, nil // closing the file releases the lock
}

// devFolderLeftByRootError is the rule that .data/ is used by one OS user:
// a run as root leaves it, its lock and NATS store to root and its cluster
// to the postgres user, which a run as oneself can neither reuse nor
// remove, file by file.
type devFolderLeftByRootError struct{ err error }

func (e *devFolderLeftByRootError) Error() string {
	return fmt.Sprintf("%v\n.data/ holds files of a make run as another user (as root, its cluster runs as postgres): "+
		"remove them as root, sudo make clean (or sudo rm -rf .data), then run again; or go on running as that user", e.err)
}

func (e *devFolderLeftByRootError) Unwrap() error { return e.err }

// leftByRoot adds to a refused access in .data/ how to clear it, when
// .data/ holds files of another OS user (not when, say, the folder is only
// read-only).
func leftByRoot(err error) error {
	if errors.Is(err, fs.ErrPermission) && othersFiles(filepath.Dir(devLock)) {
		return &devFolderLeftByRootError{err: err}
	}
	return err
}

// othersFiles reports whether dir or anything under it belongs to another
// OS user than this process's.
func othersFiles(dir string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil && d == nil {
			return nil // dir itself is missing or cannot be read
		}
		info, infoErr := d.Info()
		if infoErr != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
			found = true
			return filepath.SkipAll
		}
		if err != nil {
			return fs.SkipDir // a directory of ours it cannot read
		}
		return nil
	})
	return found
}

// devPortTakenError is the rule that `app dev` starts only when it can
// listen where it is told: setting names the address that cannot be bound.
type devPortTakenError struct {
	setting, addr string
	err           error
}

func (e *devPortTakenError) Error() string {
	return fmt.Sprintf("%s %s cannot be listened on (%v): another program, or a make run in another folder, may be there; "+
		"stop it, or choose another address, e.g. %s=:8081 make run", e.setting, e.addr, e.err, e.setting)
}

func (e *devPortTakenError) Unwrap() error { return e.err }

// checkDevPorts listens once on each address serve will listen on, and
// closes it again at once.
func checkDevPorts(cfg Config) error {
	addrs := [][2]string{{"HTTP_ADDR", cfg.HTTPAddr}}
	if cfg.AdminAddr != "" {
		addrs = append(addrs, [2]string{"ADMIN_ADDR", cfg.AdminAddr})
	}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a[1])
		if err != nil {
			return &devPortTakenError{setting: a[0], addr: a[1], err: err}
		}
		if err := ln.Close(); err != nil {
			return fmt.Errorf("close %s: %w", a[0], err)
		}
	}
	return nil
}

// demoKeysFor bounds the life of the demo's keys in a database of your
// own, should the run that made them be killed before it revokes them.
const demoKeysFor = 7 * 24 * time.Hour

// seedDemo creates the demo merchant, its staff member and the demo's keys
// (expiring at until, when set), prints the banner, and returns the keys'
// ids.
func seedDemo(ctx context.Context, cfg Config, keyFile string, stdout io.Writer, until *time.Time) (keys []string, err error) {
	db, err := database.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	store, err := refdata.New(db)
	if err != nil {
		return nil, err
	}
	create := func(merchant string, role access.Role, staffID string) (access.NewKey, error) {
		k, err := store.CreateKeyAs(ctx, access.KeySpec{MerchantName: merchant, Role: role, StaffID: staffID, Name: "make run", ExpiresAt: until})
		if err == nil {
			keys = append(keys, k.ID)
		}
		return k, err
	}
	op, err := create("demo", access.Operator, "")
	if err != nil {
		return nil, err
	}
	admin, err := create("", access.Admin, "")
	if err != nil {
		return keys, err
	}
	staffID, err := demoStaff(ctx, db, store, op.MerchantID)
	if err != nil {
		return keys, err
	}
	worker, err := create("demo", access.Worker, staffID)
	if err != nil {
		return keys, err
	}
	host, port, _ := net.SplitHostPort(cfg.HTTPAddr)
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	base := "http://" + net.JoinHostPort(host, port)
	fmt.Fprintf(stdout, `
Hearth demo merchant "demo" (%s)
  operator key: %s
  admin key:    %s
  worker key:   %s (Demo Worker's)
  staff member: %s (Demo Worker; use it in PUT /v1/orders/{id}/assignment)

Console: %s/console/
  sign in with the operator key for the dispatch board, the worker key for
  Demo Worker's jobs, the admin key for the on-call view.

Try:
  export KEY=%s
  curl -s -X POST %s/v1/customers -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -d '{"name":"Ada Lovelace","phone":"+44 20 7946 0000"}'
  curl -s -X POST %s/v1/orders -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -d '{"customer_id":"<customer id>","amount_cents":12000}'
  curl -s %s/v1/orders -H "Authorization: Bearer $KEY"

The operator's commands (keys, audit, parked, verify, rebuild; docs/operations.md) read
this database; in another shell:
  export DATABASE_URL='%s'%s
  go run ./cmd/app keys list

`, op.MerchantID, op.Secret, admin.Secret, worker.Secret, staffID, base, op.Secret, base, base, base, printableURL(cfg.DatabaseURL), keyLine(keyFile))
	if until != nil {
		fmt.Fprintf(stdout, "These keys are revoked when this run stops (and expire on %s if it is killed).\n\n", until.UTC().Format(time.DateOnly))
	}
	return keys, nil
}

// revokeDemoKeys revokes the keys a run made in a database of your own,
// once it stops (ctx done: the revocation has a context of its own).
func revokeDemoKeys(ctx context.Context, cfg Config, ids []string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	db, err := database.Open(ctx, cfg.DatabaseURL, 1)
	if err != nil {
		return fmt.Errorf("revoke the demo keys: %w", err)
	}
	defer db.Close()
	store, err := refdata.New(db)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := store.RevokeKey(ctx, id, func(_, after access.Key) ops.AuditEntry {
			return ops.AuditEntry{Actor: "system", Action: ops.ActionKeyRevoke, Target: after.ID, Details: map[string]any{"reason": "make run stopped"}}
		}); err != nil {
			return fmt.Errorf("revoke the demo key %s: %w", id, err)
		}
	}
	log.Info("the demo keys of this run were revoked", "keys", len(ids))
	return nil
}

// keyLine is the banner's line for the throwaway master key, which the
// commands that read events (parked, verify, rebuild) need to open them;
// none when the master key is the user's own.
func keyLine(file string) string {
	if file == "" {
		return ""
	}
	return fmt.Sprintf("\n  export MASTER_KEY_FILE='%s'", file)
}

// throwawayMasterKey writes a new master key to file (readable by its owner
// only) and returns its ring: what `app dev` seals with when no master key
// is configured. Its throwaway cluster is new at every start, so nothing
// sealed under an older throwaway key is left to open.
func throwawayMasterKey(file string) (*keyring.Ring, error) {
	line, err := keyring.New("dev")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, fmt.Errorf("throwaway master key: %w", err)
	}
	if err := os.WriteFile(file, []byte(line+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("throwaway master key: %w", err)
	}
	return keyring.Parse(line)
}

// printableURL is a connection string for the banner, its password (if
// any) masked.
func printableURL(conn string) string {
	u, err := url.Parse(conn)
	if err != nil || u.Scheme == "" {
		return "<your DATABASE_URL>"
	}
	return u.Redacted()
}

func demoStaff(ctx context.Context, db *bun.DB, store *refdata.Store, merchantID string) (string, error) {
	existing, err := refdata.Staff(db).List(ctx, merchantID, "Demo Worker", query.Page{Number: 1, Size: 1})
	if err != nil {
		return "", err
	}
	if len(existing.Items) > 0 {
		return existing.Items[0].ID, nil
	}
	return store.CreateStaff(ctx, merchantID, "Demo Worker")
}
