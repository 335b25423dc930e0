package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"hearth/app/access"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/database"
	"hearth/internal/refdata"
	"hearth/migrations"
	httpport "hearth/ports/http"
)

// keyFlags are the flags of `app keys ...` and `app audit list`.
type keyFlags struct {
	merchant, role, staff, name string
	expiresIn, expiresAt, grace string
	by                          string
	asJSON                      bool
	limit                       int
	target, action              string // app audit list's filters
	merchantGiven               bool   // --merchant was on the command line, even empty
}

func (k *keyFlags) register(cmd, sub string, fs *flag.FlagSet) {
	switch cmd + " " + sub {
	case "keys create":
		fs.StringVar(&k.merchant, "merchant", "", "merchant name, created if needed (operator and worker keys; not admin keys)")
		fs.StringVar(&k.role, "role", "", "operator, worker or admin")
		fs.StringVar(&k.staff, "staff", "", "staff member id (worker keys only)")
		fs.StringVar(&k.name, "name", "", "what the key is for")
		fs.StringVar(&k.expiresIn, "expires-in", "", "the key stops working after this long (a Go duration: 720h)")
		fs.StringVar(&k.expiresAt, "expires-at", "", "the key stops working at this time (RFC 3339)")
		fs.StringVar(&k.by, "by", "", "who creates it, for the audit log (defaults to cli:$USER)")
	case "keys list":
		fs.StringVar(&k.merchant, "merchant", "", "only this merchant's keys (a name)")
		fs.BoolVar(&k.asJSON, "json", false, "print JSON")
	case "keys revoke":
		fs.StringVar(&k.by, "by", "", "who revokes it, for the audit log (defaults to cli:$USER)")
	case "keys rotate":
		fs.StringVar(&k.grace, "grace", "0s", "how long the old key keeps working (0s: revoked now; at most 720h)")
		fs.StringVar(&k.by, "by", "", "who rotates it, for the audit log (defaults to cli:$USER)")
	case "keyring rewrap":
		fs.StringVar(&k.by, "by", "", "who rewraps, for the audit log (defaults to cli:$USER)")
	case "audit list":
		fs.IntVar(&k.limit, "limit", 50, "how many entries, newest first (1 to 1000)")
		fs.StringVar(&k.target, "target", "", "only this target's entries, however old (customer/ID, staff_member/ID, a key id, ...)")
		fs.StringVar(&k.action, "action", "", "only this action's entries, however old (customer.export, key.revoke, ...)")
		fs.BoolVar(&k.asJSON, "json", false, "print JSON")
	}
}

// keyFlagNames maps the fields of key errors to the flags that set them.
var keyFlagNames = map[string]string{
	"merchant_id": "--merchant", "merchant": "--merchant", "role": "--role", "staff_id": "--staff",
	"name": "--name", "grace": "--grace", "by": "--by", "id": "ID", "confirm": "--confirm",
	"batch": "--batch", "projection": "PROJECTION", "reason": "--reason", "event_id": "--event",
}

// flagError renders a validation error with flag names instead of fields;
// other errors are returned as they are.
func flagError(verb string, err error, expiresFlag string) error {
	var invalid *apperr.ValidationError
	if !errors.As(err, &invalid) {
		return fmt.Errorf("%s: %w", verb, err)
	}
	parts := make([]string, len(invalid.Fields))
	for i, f := range invalid.Fields {
		name := keyFlagNames[f.Field]
		if f.Field == "expires_at" {
			name = expiresFlag
		}
		parts[i] = name + ": " + f.Message
	}
	return errors.New(verb + ": " + strings.Join(parts, "; "))
}

// asUsage turns an error into a usage error (exit status 2).
func asUsage(err error) error { return usageError{err.Error()} }

// actor is who the CLI records an admin action for: --by, or cli:$USER.
func actor(by string, getenv func(string) string) string {
	if by != "" {
		return by
	}
	return "cli:" + cmpOr(getenv("USER"), "unknown")
}

// adminTools are the use cases of `app keys` and `app audit`: on the event
// store alone, so that they work while the read model is away.
type adminTools struct {
	keys  *access.Keys
	audit *ops.AuditTrail
	close func()
}

// openAdminTools opens and migrates the event store for the key and audit
// commands.
func openAdminTools(ctx context.Context, cfg Config) (adminTools, error) {
	db, err := database.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return adminTools{}, fmt.Errorf("DATABASE_URL: %w", err)
	}
	t := adminTools{close: func() { _ = db.Close() }}
	if err := checkNotOther(ctx, db, "DATABASE_URL", migrations.EventStore, migrations.ReadModel); err != nil {
		t.close()
		return adminTools{}, err
	}
	if _, err := migrations.Apply(ctx, db.DB, migrations.EventStore); err != nil {
		t.close()
		return adminTools{}, err
	}
	store, err := refdata.New(db)
	if err == nil {
		t.keys, err = access.NewKeys(store)
	}
	if err == nil {
		t.audit, err = ops.NewAuditTrail(store)
	}
	if err != nil {
		t.close()
		return adminTools{}, err
	}
	return t, nil
}

// keys runs `app keys create|list|revoke|rotate`. Secrets are printed once,
// alone on the last line of stdout.
func keys(ctx context.Context, cfg Config, sub string, k keyFlags, args []string, getenv func(string) string, stdout io.Writer) error {
	verb := "keys " + sub
	var id string
	switch sub {
	case "create", "list":
		if len(args) > 0 {
			return usageError{fmt.Sprintf("%s: unexpected arguments %q", verb, args)}
		}
		if sub == "list" && k.merchantGiven && strings.TrimSpace(k.merchant) == "" {
			// A script whose variable was empty: read as absent, it would
			// list every merchant's keys where one merchant's were asked for.
			return usageError{verb + ": --merchant must name a merchant when given; leave it out for every merchant's keys"}
		}
	default:
		if len(args) != 1 {
			return usageError{verb + ": name one key: " + verb + " ID"}
		}
		var ok bool
		if id, ok = uuid.Parse(args[0]); !ok {
			// Not repeated: a key's secret given for its id is the likely slip.
			return usageError{verb + ": ID must be a key's id, a UUID as `app keys list` shows it (not its secret)"}
		}
	}
	by := actor(k.by, getenv)
	if sub != "list" {
		if err := ops.CheckActor(by); err != nil {
			return asUsage(flagError(verb, err, ""))
		}
	}
	var spec access.KeySpec
	var grace time.Duration
	expiresFlag := ""
	switch sub {
	case "create":
		var err error
		if spec, expiresFlag, err = keySpec(k); err != nil {
			return asUsage(fmt.Errorf("%s: %w", verb, err))
		}
		if spec, err = spec.Check(time.Now()); err != nil {
			return asUsage(flagError(verb, err, expiresFlag))
		}
	case "rotate":
		var err error
		if grace, err = time.ParseDuration(k.grace); err != nil {
			return usageError{fmt.Sprintf("%s: --grace must be a duration such as 24h or 90m, got %q", verb, k.grace)}
		}
		if err := access.CheckGrace(grace); err != nil {
			return asUsage(flagError(verb, err, ""))
		}
	}
	tools, err := openAdminTools(ctx, cfg)
	if err != nil {
		return err
	}
	defer tools.close()
	switch sub {
	case "create":
		key, err := tools.keys.IssueKey(ctx, spec, by)
		if err != nil {
			return flagError(verb, err, expiresFlag)
		}
		_, err = fmt.Fprintf(stdout, "# %s; it is shown only now:\n%s\n", describeKey(key.Key), key.Secret)
		return secretUnshown(verb, err, fmt.Sprintf("key %s was created", key.ID), key.ID)
	case "list":
		return listKeys(ctx, tools.keys, k, stdout)
	case "revoke":
		key, err := tools.keys.RevokeKey(ctx, id, by)
		if errors.Is(err, apperr.ErrNotFound) {
			return fmt.Errorf("%s: no key %s", verb, id)
		}
		if err != nil {
			return flagError(verb, err, "")
		}
		fmt.Fprintf(stdout, "%s: revoked at %s; API instances refuse it once their cached copy expires (KEY_CACHE_TTL)\n",
			describeKey(key), key.RevokedAt.Format(time.RFC3339))
		return nil
	default: // rotate
		rot, err := tools.keys.RotateKey(ctx, id, grace, by)
		if errors.Is(err, apperr.ErrNotFound) {
			return fmt.Errorf("%s: no key %s", verb, id)
		}
		if err != nil {
			return flagError(verb, err, "")
		}
		old := "revoked now, refused once API instances' cached copies expire (KEY_CACHE_TTL)"
		if rot.Previous.RevokedAt == nil {
			old = "works until " + rot.Previous.ExpiresAt.Format(time.RFC3339)
		}
		_, err = fmt.Fprintf(stdout, "# key %s rotated: %s (the old key %s); the new key is shown only now:\n%s\n",
			id, describeKey(rot.Key), old, rot.Secret)
		return secretUnshown(verb, err, fmt.Sprintf("key %s was rotated into key %s (the old key %s)", id, rot.Key.ID, old), rot.Key.ID)
	}
}

// secretUnshown is the failure of a key command whose secret could not be
// written to stdout (a full disk behind a redirect, a closed pipe): the key
// exists and is shown only once, so exit 0 would leave the operator
// believing they hold a key nobody has. It says what was done and how to
// undo it; nil when the write succeeded.
func secretUnshown(verb string, err error, done, made string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: print the new key: %w; %s, but its secret was never shown: revoke it (app keys revoke %s) and create another",
		verb, err, done, made)
}

// keySpec reads the flags of `keys create`; it returns the flag the expiry
// came from.
func keySpec(k keyFlags) (access.KeySpec, string, error) {
	spec := access.KeySpec{MerchantName: k.merchant, Role: access.Role(k.role), StaffID: k.staff, Name: k.name}
	switch {
	case k.expiresIn != "" && k.expiresAt != "":
		return spec, "", errors.New("give --expires-in or --expires-at, not both")
	case k.expiresIn != "":
		d, err := time.ParseDuration(k.expiresIn)
		if err != nil {
			return spec, "", fmt.Errorf("--expires-in must be a duration such as 720h, got %q", k.expiresIn)
		}
		if d <= 0 {
			return spec, "", fmt.Errorf("--expires-in must be positive, got %s", d)
		}
		at := time.Now().Add(d)
		spec.ExpiresAt = &at
		return spec, "--expires-in", nil
	case k.expiresAt != "":
		at, err := time.Parse(time.RFC3339Nano, k.expiresAt)
		if err != nil {
			return spec, "", fmt.Errorf("--expires-at must be an RFC 3339 time such as 2030-01-02T15:04:05Z, got %q", k.expiresAt)
		}
		if problem := event.InstantProblem(at); problem != "" {
			return spec, "", fmt.Errorf("--expires-at %s, got %q", problem, k.expiresAt)
		}
		spec.ExpiresAt = &at
		return spec, "--expires-at", nil
	}
	return spec, "", nil
}

// describeKey is one line about a key, for the CLI.
func describeKey(k access.Key) string {
	s := fmt.Sprintf("%s key %s", k.Role, k.ID)
	if k.MerchantID == "" {
		s += " (platform; no merchant)"
	} else {
		s += fmt.Sprintf(" for merchant %q (%s)", k.MerchantName, k.MerchantID)
	}
	if k.StaffID != "" {
		s += ", staff member " + k.StaffID
	}
	if k.Name != "" {
		s += fmt.Sprintf(", named %q", k.Name)
	}
	if k.ExpiresAt != nil {
		s += ", expires " + k.ExpiresAt.Format(time.RFC3339)
	}
	return s
}

// listKeys prints every key (or one merchant's), newest first: never a
// secret or a hash.
func listKeys(ctx context.Context, keys *access.Keys, k keyFlags, stdout io.Writer) error {
	merchantID := ""
	if k.merchant != "" {
		var err error
		if merchantID, err = keys.MerchantID(ctx, k.merchant); errors.Is(err, apperr.ErrNotFound) {
			return fmt.Errorf("keys list: no merchant named %q", k.merchant)
		} else if err != nil {
			return err
		}
	}
	all := []access.Key{}
	for page := 1; ; page++ {
		got, total, err := keys.ListKeys(ctx, merchantID, query.Page{Number: page, Size: 200})
		if err != nil {
			return err
		}
		all = append(all, got...)
		if len(got) == 0 || len(all) >= total {
			break
		}
	}
	return cliList[access.Key, httpport.KeyBody]{
		body:   httpport.KeyBodyOf,
		header: "ID\tMERCHANT\tROLE\tSTAFF\tNAME\tCREATED\tLAST USED\tEXPIRES\tREVOKED",
		row: func(key access.Key) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", key.ID, cmpOr(key.MerchantName, "-"), key.Role,
				cmpOr(key.StaffID, "-"), cmpOr(oneLine(key.Name, 40), "-"), key.CreatedAt.Format(time.RFC3339),
				timeOrDash(key.LastUsedAt), timeOrDash(key.ExpiresAt), timeOrDash(key.RevokedAt))
		},
		footer: fmt.Sprintf("%d keys", len(all)),
	}.print(stdout, k.asJSON, all)
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// auditList runs `app audit list`: the newest entries of the admin audit
// log, or of one target's or one action's.
func auditList(ctx context.Context, cfg Config, k keyFlags, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("audit list: unexpected arguments %q", args)}
	}
	if k.limit < 1 || k.limit > 1000 {
		return usageError{fmt.Sprintf("audit list: --limit must be from 1 to 1000, got %d", k.limit)}
	}
	f := ops.AuditFilter{Target: k.target, Action: k.action}
	if field, problem := f.Problem(); problem != "" {
		return usageError{fmt.Sprintf("audit list: --%s %s", field, problem)}
	}
	tools, err := openAdminTools(ctx, cfg)
	if err != nil {
		return err
	}
	defer tools.close()
	items, total, err := tools.audit.ListAuditOf(ctx, f, query.Page{Number: 1, Size: k.limit})
	if err != nil {
		return err
	}
	return cliList[ops.AuditEntry, httpport.AuditEntryBody]{
		body:   httpport.AuditEntryBodyOf,
		header: "AT\tACTOR\tACTION\tTARGET\tDETAILS",
		row: func(e ops.AuditEntry) string {
			details, _ := json.Marshal(e.Details)
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", e.At.UTC().Format(time.RFC3339), e.Actor, e.Action, e.Target, oneLine(string(details), 160))
		},
		footer: fmt.Sprintf("%d of %d entries", len(items), total),
	}.print(stdout, k.asJSON, items)
}
