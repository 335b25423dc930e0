// Package keyring holds Hearth's master keys and seals secrets with them:
// AES-256-GCM from the standard library, each sealed value naming the
// master key that sealed it, so that a new key can be introduced and what
// the old one sealed re-sealed (Reseal) without a flag day.
//
// A master key is written as one line, "ID:KEY", KEY being 32 random bytes
// in standard base64 (New makes one). A ring is one or more such lines: the
// first is the active key, which seals everything new; the others only open
// what they sealed until it has been re-sealed under the active key.
//
// A sealed value is: a format byte (1), the length of the key id, the key
// id, a 12-byte random nonce, then the ciphertext and its 16-byte tag. The
// caller's associated data (the row or subject a secret belongs to) is
// authenticated, not stored: a sealed value copied to another row does not
// open there.
package keyring

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is a master key's size in bytes: AES-256.
const KeySize = 32

// format is the first byte of every sealed value.
const format = 1

// ErrUnknownKey is a sealed value whose master key is not in the ring.
var ErrUnknownKey = errors.New("keyring: sealed by a master key that is not configured")

// ErrOpen is a sealed value that does not open: tampered with, truncated,
// sealed for other associated data, or not sealed by Hearth at all.
var ErrOpen = errors.New("keyring: sealed value does not open (tampered with, or sealed for another row)")

// Ring is a set of master keys, the first of which is active. It is safe
// for concurrent use.
type Ring struct {
	active string
	ids    []string
	aeads  map[string]cipher.AEAD
}

// Parse reads a ring: one "ID:KEY" per line (or separated by commas), the
// first line the active key. Blank lines and lines starting with # are
// skipped. Every error names the line and what is wrong with it, never the
// key itself.
func Parse(text string) (*Ring, error) {
	r := &Ring{aeads: map[string]cipher.AEAD{}}
	lines := strings.FieldsFunc(text, func(c rune) bool { return c == '\n' || c == ',' })
	n := 0
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		id, encoded, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("key %d: must be ID:KEY (KEY: %d random bytes in base64; `app keyring new` makes one)", n, KeySize)
		}
		if err := checkID(id); err != nil {
			if looksLikeKey(id) {
				return nil, fmt.Errorf("key %d: must be ID:KEY, and this one reads KEY:ID", n)
			}
			// Not quoted: a malformed line may hold the key where its ID goes.
			return nil, fmt.Errorf("key %d: the ID before the first ':' (%d characters) must be 1 to 64 letters, digits, '-', '_' or '.'", n, len(id))
		}
		// Until its KEY is one, the line's ID is not repeated either: a key
		// in hex or in unpadded or URL-safe base64 is made of letters,
		// digits, '-' and '_', and passes for an ID in a line written KEY:ID.
		key, err := base64.StdEncoding.DecodeString(encoded)
		switch {
		case (err != nil || len(key) != KeySize) && looksLikeKey(id):
			return nil, fmt.Errorf("key %d: must be ID:KEY, and this one reads KEY:ID", n)
		case err != nil:
			return nil, fmt.Errorf("key %d: KEY is not standard base64", n)
		case len(key) != KeySize:
			return nil, fmt.Errorf("key %d: KEY must be %d bytes, not %d", n, KeySize, len(key))
		}
		if _, dup := r.aeads[id]; dup {
			return nil, fmt.Errorf("key %d: id %s is given twice", n, id)
		}
		aead, err := newAEAD(key)
		if err != nil {
			return nil, fmt.Errorf("key %d (%s): %w", n, id, err)
		}
		r.aeads[id] = aead
		r.ids = append(r.ids, id)
	}
	if n == 0 {
		return nil, errors.New("no master key")
	}
	r.active = r.ids[0]
	return r, nil
}

// looksLikeKey reports whether s decodes to KeySize bytes in one of the
// encodings keys are handed out in: hex, or base64 of either alphabet,
// padded or not.
func looksLikeKey(s string) bool {
	if k, err := hex.DecodeString(s); err == nil && len(k) == KeySize {
		return true
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return true
		}
	}
	return false
}

// checkID accepts 1 to 64 characters of letters, digits, '-', '_' and '.'.
func checkID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("ID must be 1 to 64 characters, not %d", len(id))
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("ID %q may hold only letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

// New makes a master key line "ID:KEY" with a fresh random key.
func New(id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("keyring: random key: %w", err)
	}
	return id + ":" + base64.StdEncoding.EncodeToString(key), nil
}

// ActiveID is the id of the key that seals.
func (r *Ring) ActiveID() string { return r.active }

// IDs are the ring's key ids, the active one first.
func (r *Ring) IDs() []string { return append([]string(nil), r.ids...) }

// Seal encrypts plaintext under the active key, authenticating aad with it.
func (r *Ring) Seal(plaintext, aad []byte) ([]byte, error) {
	aead := r.aeads[r.active]
	out := make([]byte, 0, 2+len(r.active)+aead.NonceSize()+len(plaintext)+aead.Overhead())
	out = append(out, format, byte(len(r.active)))
	out = append(out, r.active...)
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("keyring: random nonce: %w", err)
	}
	out = append(out, nonce...)
	return aead.Seal(out, nonce, plaintext, aad), nil
}

// Open decrypts a value Seal made with the same aad, under whichever key of
// the ring sealed it.
func (r *Ring) Open(sealed, aad []byte) ([]byte, error) {
	id, body, err := split(sealed)
	if err != nil {
		return nil, err
	}
	aead, ok := r.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w (key id %s; configured: %s)", ErrUnknownKey, id, strings.Join(r.ids, ", "))
	}
	if len(body) < aead.NonceSize()+aead.Overhead() {
		return nil, ErrOpen
	}
	nonce, ciphertext := body[:aead.NonceSize()], body[aead.NonceSize():]
	plain, err := aead.Open(nil, nonce, ciphertext, aad)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// KeyID is the id of the master key that sealed a value.
func KeyID(sealed []byte) (string, error) {
	id, _, err := split(sealed)
	return id, err
}

// Stale reports whether a sealed value was sealed by another key than the
// active one, and so should be re-sealed (Reseal).
func (r *Ring) Stale(sealed []byte) bool {
	id, _, err := split(sealed)
	return err == nil && id != r.active
}

// Reseal opens a value under whichever key sealed it and seals it again
// under the active key.
func (r *Ring) Reseal(sealed, aad []byte) ([]byte, error) {
	plain, err := r.Open(sealed, aad)
	if err != nil {
		return nil, err
	}
	return r.Seal(plain, aad)
}

func split(sealed []byte) (id string, body []byte, err error) {
	if len(sealed) < 2 || sealed[0] != format || len(sealed) < 2+int(sealed[1]) {
		return "", nil, ErrOpen
	}
	n := int(sealed[1])
	if bytes.IndexByte(sealed[2:2+n], 0) >= 0 || n == 0 {
		return "", nil, ErrOpen
	}
	return string(sealed[2 : 2+n]), sealed[2+n:], nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	return cipher.NewGCM(block)
}
