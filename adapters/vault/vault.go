// Package vault seals the personal fields of events with a data key per
// data subject (a customer), and is the one place that opens them again:
// the store's command side, projections and their catch-up, parking,
// verify, rebuild, the event feed and webhook deliveries all decode stored
// events through Vault.Decoder (docs/personal-data.md).
//
// A data key is 32 random bytes (AES-256-GCM), kept in data_keys sealed by
// the master key (internal/keyring) with the subject's id as associated
// data, so re-wrapping under a new master key touches no event. Erasure
// deletes the subject's key and records the subject in erased_subjects:
// its sealed fields then read as erased everywhere at once, and a missing
// key of a subject that was not erased is an error (the aggregate parks),
// never a silent empty field.
//
// A sealed event keeps its ids, amounts, times and statuses in clear; its
// personal fields (domain packages' Personal) are removed from the data and
// replaced by one member:
//
//	"sealed": {"subject": "<customer id>", "fields": ["notes"], "box": "<base64>"}
//
// box is a 12-byte nonce and the AES-GCM ciphertext of the removed fields
// as one JSON object, authenticated with the subject id and the event type.
package vault

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"hearth/domain/event"
	"hearth/internal/aggregates"
	"hearth/internal/keyring"
)

// CacheFor is how long an opened data key is kept in memory before it is
// read again. An erasure on another instance is seen here within it, so
// erasure waits it out before its last pass (app/ops Erase).
const CacheFor = 5 * time.Second

// cacheMax bounds the keys kept in memory; past it the cache starts over.
const cacheMax = 100_000

// lookupTimeout bounds one read of a data key: decoders have no context of
// their own.
const lookupTimeout = 5 * time.Second

// keySize is a data key's size: AES-256.
const keySize = 32

// MissingKeyError is a sealed event whose subject has no data key and was
// not erased: its data cannot be read, and nothing may pretend otherwise.
type MissingKeyError struct{ Subject string }

func (e *MissingKeyError) Error() string {
	return fmt.Sprintf("the data key of subject %s is missing, and the subject was not erased: restore data_keys from a backup, or erase the subject", e.Subject)
}

// ErasedError is a write of personal data for a subject that was erased.
type ErasedError struct{ Subject string }

func (e *ErasedError) Error() string { return fmt.Sprintf("subject %s was erased", e.Subject) }

// lookupError is a failed read of a data key: worth a retry, unlike a
// missing key.
type lookupError struct{ err error }

func (e *lookupError) Error() string   { return e.err.Error() }
func (e *lookupError) Unwrap() error   { return e.err }
func (e *lookupError) Temporary() bool { return true }

// Box is the sealed member of an event's data.
type Box struct {
	Subject string   `json:"subject"`
	Fields  []string `json:"fields"`
	Box     []byte   `json:"box"`

	// fields and count are the fields' JSON array and its length, as the
	// fast path (scanBox) leaves them instead of Fields: their names are
	// needed only to mark them erased.
	fields []byte
	count  int
}

// names returns how many fields b names.
func (b *Box) names() int {
	if b.fields != nil {
		return b.count
	}
	return len(b.Fields)
}

// erasure is the erased marker of b's fields, as a JSON object.
func (b *Box) erasure() ([]byte, error) {
	if b.fields != nil {
		return slices.Concat([]byte(`{"erased":`), b.fields, []byte(`}`)), nil
	}
	return json.Marshal(event.Erasure{ErasedFields: b.Fields})
}

// Vault seals and opens personal fields. It is safe for concurrent use.
type Vault struct {
	db   *sql.DB
	ring *keyring.Ring
	now  func() time.Time

	mu    sync.Mutex
	cache map[string]entry
}

type entry struct {
	aead   cipher.AEAD // nil when erased
	erased bool
	at     time.Time
}

// New returns a vault on the event-store database, whose data keys the
// ring's master keys seal.
func New(db *sql.DB, ring *keyring.Ring) (*Vault, error) {
	if db == nil || ring == nil {
		return nil, errors.New("vault.New: db and ring are required")
	}
	return &Vault{db: db, ring: ring, now: time.Now, cache: map[string]entry{}}, nil
}

// Decoder implements aggregates.Decoders: the decoder of aggregate type f that opens sealed fields:
// with the subject's key they come back as written, without it (erased)
// they are empty and named in the event's erased marker (event.Erasure).
func (v *Vault) Decoder(f aggregates.Facts) event.Decoder { return v.decoder(f, "") }

// Erasing implements aggregates.Decoders.
func (v *Vault) Erasing(f aggregates.Facts, subject string) event.Decoder {
	return v.decoder(f, subject)
}

var sealedMember = []byte(`"sealed"`)

func (v *Vault) decoder(f aggregates.Facts, erasing string) event.Decoder {
	return func(eventType string, data []byte, more ...[]byte) (event.Event, error) {
		at, start, end, sealed := sealedIn(data)
		if !sealed {
			return f.Decode(eventType, data, more...)
		}
		box, err := parseBox(data[start:end])
		if err != nil {
			return nil, fmt.Errorf("decode %s: sealed member: %w", eventType, err)
		}
		opened, err := v.open(box, eventType, erasing)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", eventType, err)
		}
		if merged, ok := spliced(data, at, end, opened); ok {
			return f.Decode(eventType, merged, more...)
		}
		return f.Decode(eventType, data, append([][]byte{opened}, more...)...)
	}
}

// open returns the JSON object the box's fields decode from: the fields
// themselves, or the erased marker naming them.
func (v *Vault) open(b *Box, eventType, erasing string) ([]byte, error) {
	if b.Subject == "" || b.names() == 0 {
		return nil, errors.New("sealed fields name no subject or no field")
	}
	e := entry{erased: true}
	if b.Subject != erasing {
		var err error
		if e, err = v.key(b.Subject); err != nil {
			return nil, err
		}
	}
	if e.erased {
		return b.erasure()
	}
	n := e.aead.NonceSize()
	if len(b.Box) < n+e.aead.Overhead() {
		return nil, fmt.Errorf("sealed fields of subject %s are truncated", b.Subject)
	}
	// The box is this call's own copy: the fields open in its place.
	plain, err := e.aead.Open(b.Box[n:n], b.Box[:n], b.Box[n:], aad(b.Subject, eventType))
	if err != nil {
		return nil, fmt.Errorf("sealed fields of subject %s do not open (tampered with, or sealed for another event type)", b.Subject)
	}
	return plain, nil
}

func aad(subject, eventType string) []byte {
	return append(append(append(make([]byte, 0, len(subject)+1+len(eventType)), subject...), '/'), eventType...)
}

// key returns the subject's key from the cache, or reads it.
func (v *Vault) key(subject string) (entry, error) {
	if e, ok := v.cached(subject); ok {
		return e, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	var sealed []byte
	var erased bool
	err := v.db.QueryRowContext(ctx, `SELECT (SELECT sealed FROM data_keys WHERE subject_id = $1),
		EXISTS (SELECT 1 FROM erased_subjects WHERE subject_id = $1)`, subject).Scan(&sealed, &erased)
	if err != nil {
		return entry{}, &lookupError{fmt.Errorf("read the data key of subject %s: %w", subject, err)}
	}
	switch {
	case erased:
		e := entry{erased: true}
		v.put(subject, e)
		return e, nil
	case sealed == nil:
		return entry{}, &MissingKeyError{Subject: subject}
	}
	return v.adopt(subject, sealed)
}

func (v *Vault) cached(subject string) (entry, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.cache[subject]
	if !ok || (!e.erased && v.now().Sub(e.at) >= CacheFor) {
		return entry{}, false
	}
	return e, true
}

func (v *Vault) put(subject string, e entry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.cache) >= cacheMax {
		clear(v.cache)
	}
	e.at = v.now()
	v.cache[subject] = e
}

// Prefetch reads, in one query, the data keys of the subjects whose sealed
// events are among payloads (envelopes as published, their data under
// "data") and that the cache does not hold, so that decoding a catch-up
// page costs one lookup instead of one per customer. It is an
// optimisation only: what it cannot read, the decoder reads (or reports)
// itself, event by event.
func (v *Vault) Prefetch(payloads [][]byte) {
	data := make([][]byte, 0, len(payloads))
	for _, p := range payloads {
		if _, start, end, ok := member(p, "data"); ok {
			data = append(data, p[start:end])
		}
	}
	v.PrefetchData(data)
}

// PrefetchData is Prefetch of events' data as stored (the event feed's
// page, a webhook round's claimed events, read from the events table): one
// lookup for their keys instead of one per customer.
func (v *Vault) PrefetchData(data [][]byte) {
	seen := map[string]bool{}
	var missing []string
	for _, d := range data {
		subject, ok := subjectOf(d)
		if !ok || seen[subject] {
			continue
		}
		seen[subject] = true
		if _, ok := v.cached(subject); !ok {
			missing = append(missing, subject)
		}
	}
	if len(missing) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	rows, err := v.db.QueryContext(ctx, `SELECT s.id::text, k.sealed, e.subject_id IS NOT NULL
		FROM unnest($1::text[]::uuid[]) AS s(id)
		LEFT JOIN data_keys k ON k.subject_id = s.id LEFT JOIN erased_subjects e ON e.subject_id = s.id`, missing)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var subject string
		var sealed []byte
		var erased bool
		if rows.Scan(&subject, &sealed, &erased) != nil {
			return
		}
		switch {
		case erased:
			v.put(subject, entry{erased: true})
		case sealed != nil:
			_, _ = v.adopt(subject, sealed)
		}
	}
}

// Forget drops a subject's key from this instance's cache (the erasure
// that deleted it ran here).
func (v *Vault) Forget(subject string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.cache, subject)
}

// Adopt unwraps a data key read from data_keys (KeySQL) and caches it.
func (v *Vault) Adopt(subject string, sealed []byte) error {
	_, err := v.adopt(subject, sealed)
	return err
}

func (v *Vault) adopt(subject string, sealed []byte) (entry, error) {
	key, err := v.ring.Open(sealed, []byte(subject))
	if err != nil {
		return entry{}, fmt.Errorf("unwrap the data key of subject %s: %w", subject, err)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return entry{}, err
	}
	e := entry{aead: aead}
	v.put(subject, e)
	return e, nil
}

// Cached reports whether the subject's key is cached, usable to seal and
// opened less than CacheFor ago, so that a writer can skip reading it
// (KeySQL). An older key is read again: KeySQL refuses a subject erased
// meanwhile, so an instance that opened a key before another erased it
// seals with it for at most CacheFor, the time the erasure waits before
// its last pass, which finds what was sealed meanwhile (its subject_id)
// and marks its stream.
func (v *Vault) Cached(subject string) bool {
	e, ok := v.cached(subject)
	return ok && !e.erased
}

// sealKey is the subject's cached key for sealing, however old: the writer
// checked it with Cached (or adopted it) just before.
func (v *Vault) sealKey(subject string) (cipher.AEAD, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.cache[subject]
	if !ok || e.erased {
		return nil, false
	}
	return e.aead, true
}

// NewKey makes a fresh data key for subject, sealed by the active master
// key: what a writer inserts into data_keys when the subject has none
// (KeySQL).
func (v *Vault) NewKey(subject string) ([]byte, error) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("vault: random data key: %w", err)
	}
	return v.ring.Seal(key, []byte(subject))
}

// KeySQL returns the subject's sealed data key, inserting $4 (NewKey) when
// it has none; no row when the subject was erased. Arguments: subject id,
// merchant id, subject type, new sealed key. Inside a command's transaction
// it waits for a concurrent first insert, so a subject never gets two keys.
const KeySQL = `
	INSERT INTO data_keys (subject_id, merchant_id, subject_type, sealed)
	SELECT $1, $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM erased_subjects WHERE subject_id = $1)
	ON CONFLICT (subject_id) DO UPDATE SET subject_id = excluded.subject_id
	RETURNING sealed`

// CustomerWriteSQL is the check of a customer ($1, of merchant $2) by a
// write that seals for it: it takes the lock that such writes and the
// customer's erasure meet on, shared, and then returns the customer's name,
// failing with SQLSTATE CustomerMissing when the merchant has no such
// customer and CustomerErased when the customer was erased (migration
// eventstore/021). An erasure that began first is waited for, and the
// write then fails; one that begins later waits for the write, and sees
// what it wrote.
const CustomerWriteSQL = `SELECT hearth_customer_write($1, $2)`

// The SQLSTATEs of CustomerWriteSQL's refusals.
const (
	CustomerMissing = "HT002"
	CustomerErased  = "HT003"
)

// WriteLockSQL takes CustomerWriteSQL's lock of a subject ($1), shared,
// without its checks: what a write takes for a subject whose new events
// carry no personal text (Blank), which an erasure need not refuse.
const WriteLockSQL = `SELECT pg_advisory_xact_lock_shared(hearth_subject_lock($1))`

// EraseLockSQL takes CustomerWriteSQL's lock of a subject ($1) alone, as
// an erasure's first statement.
const EraseLockSQL = `SELECT pg_advisory_xact_lock(hearth_subject_lock($1))`

// Seal replaces fields of an event's JSON data by the sealed member,
// encrypted under the subject's key, which the writer has just checked
// (Cached) or adopted (Adopt); a subject seen erased since is an
// *ErasedError.
// Fields that data does not hold are left out; data without any is
// returned as it is.
func (v *Vault) Seal(subject, eventType string, data []byte, fields []string) ([]byte, error) {
	aead, ok := v.sealKey(subject)
	if !ok {
		return nil, &ErasedError{Subject: subject}
	}
	return SealWith(aead, subject, eventType, data, fields)
}

// SealErased is Seal for a subject that was erased, of an event that
// carries no personal text (Blank) or closes their aggregate (a
// cancellation's reason): under a key made for it and never stored, as app
// protect seals an erased customer's events, so any text in it reads as
// erased from the moment it is written. Readers find
// the subject erased and read the fields as erased without opening the
// box; the event is sealed for the subject like the others, so erasure and
// app protect find it as theirs.
func SealErased(subject, eventType string, data []byte, fields []string) ([]byte, error) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("vault: random key: %w", err)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	return SealWith(aead, subject, eventType, data, fields)
}

// Blank reports whether an event's JSON data holds no personal text: each
// of fields is absent, null or "". Such an event says nothing about its
// subject (an order unassigned, a payment without a note), so a subject's
// erasure need not refuse it.
func Blank(data []byte, fields []string) (bool, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return false, fmt.Errorf("read personal fields: %w", err)
	}
	for _, f := range fields {
		raw, ok := m[f]
		if !ok {
			continue
		}
		if s := string(bytes.TrimSpace(raw)); s != `""` && s != "null" {
			return false, nil
		}
	}
	return true, nil
}

// SealWith is Seal with the key given.
func SealWith(aead cipher.AEAD, subject, eventType string, data []byte, fields []string) ([]byte, error) {
	rest, text, names, ok := cut(data, fields)
	if !ok {
		var err error
		if rest, text, names, err = cutSlowly(data, fields); err != nil {
			return nil, fmt.Errorf("seal %s: %w", eventType, err)
		}
	}
	if len(names) == 0 {
		return data, nil
	}
	if bytes.Contains(rest, sealedMember) {
		if _, _, _, sealed := member(rest, "sealed"); sealed {
			return nil, fmt.Errorf("seal %s: it is sealed already", eventType)
		}
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(text)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("vault: random nonce: %w", err)
	}
	box, err := json.Marshal(Box{Subject: subject, Fields: names, Box: aead.Seal(nonce, nonce, text, aad(subject, eventType))})
	if err != nil {
		return nil, err
	}
	// rest ends with the object's closing brace: the member goes before it.
	end := bytes.LastIndexByte(rest, '}')
	out := make([]byte, 0, len(rest)+len(box)+12)
	out = append(out, rest[:end]...)
	if bytes.ContainsFunc(rest[1:end], func(r rune) bool { return !isSpace(byte(r)) }) {
		out = append(out, ',')
	}
	out = append(out, `"sealed":`...)
	out = append(out, box...)
	return append(out, rest[end:]...), nil
}

// cutSlowly is cut through a decoded map, for data of another shape.
func cutSlowly(data []byte, fields []string) (rest, removed []byte, names []string, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, nil, nil, err
	}
	plain := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		if raw, ok := m[f]; ok {
			plain[f] = raw
			names = append(names, f)
			delete(m, f)
		}
	}
	if rest, err = json.Marshal(m); err != nil {
		return nil, nil, nil, err
	}
	removed, err = json.Marshal(plain)
	return rest, removed, names, err
}

// SealedBy returns the subject an event's data is sealed for, "" when it is
// not sealed.
func SealedBy(data []byte) (string, error) {
	b, err := boxOf(data)
	if err != nil || b == nil {
		return "", err
	}
	return b.Subject, nil
}

// Rewrap re-seals every data key sealed by another master key than the
// ring's active one, in pages, and returns how many it re-sealed. Events
// are not touched.
func (v *Vault) Rewrap(ctx context.Context) (int, error) {
	total := 0
	after := "00000000-0000-0000-0000-000000000000"
	for {
		rows, err := v.db.QueryContext(ctx, `SELECT subject_id::text, sealed FROM data_keys WHERE subject_id > $1 ORDER BY subject_id LIMIT 500`, after)
		if err != nil {
			return total, fmt.Errorf("read data keys: %w", err)
		}
		type row struct {
			id     string
			sealed []byte
		}
		var page []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.sealed); err != nil {
				rows.Close()
				return total, err
			}
			page = append(page, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, err
		}
		if len(page) == 0 {
			return total, nil
		}
		for _, r := range page {
			after = r.id
			if !v.ring.Stale(r.sealed) {
				continue
			}
			resealed, err := v.ring.Reseal(r.sealed, []byte(r.id))
			if err != nil {
				return total, fmt.Errorf("data key of subject %s: %w", r.id, err)
			}
			// Only if unchanged: an erasure in between wins.
			res, err := v.db.ExecContext(ctx, `UPDATE data_keys SET sealed = $2 WHERE subject_id = $1 AND sealed = $3`, r.id, resealed, r.sealed)
			if err != nil {
				return total, fmt.Errorf("re-seal the data key of subject %s: %w", r.id, err)
			}
			if n, _ := res.RowsAffected(); n == 1 {
				total++
			}
		}
	}
}

// StillSealed counts the data keys sealed by another master key than the
// ring's active one, per master key id: after Rewrap, those an instance
// still sealing with an older key wrote behind its pages.
func (v *Vault) StillSealed(ctx context.Context) (map[string]int, error) {
	// Only the head of each sealed key (format, id length, id) is read.
	rows, err := v.db.QueryContext(ctx, `SELECT substring(sealed FROM 1 FOR 2 + get_byte(sealed, 1)), count(*)
		FROM data_keys WHERE length(sealed) >= 2 GROUP BY 1`)
	if err != nil {
		return nil, fmt.Errorf("count data keys by master key: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var head []byte
		var n int
		if err := rows.Scan(&head, &n); err != nil {
			return nil, err
		}
		if id, err := keyring.KeyID(head); err == nil && v.ring.Stale(head) {
			out[id] += n
		}
	}
	return out, rows.Err()
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	return cipher.NewGCM(block)
}
