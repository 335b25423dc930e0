package access

import "time"

// The web console's sessions, as its store keeps them (ports/http/console
// declares the store; internal/refdata keeps them beside the keys). A
// session stands for the key it was opened with: it works only while the
// key does.

// NewSession opens a session.
type NewSession struct {
	// TokenHash is the SHA-256 of the cookie's token; the token itself is
	// kept nowhere.
	TokenHash []byte
	// KeyID is the key signed in with; its secret is not kept.
	KeyID string
	// TimeZone is the browser's time zone (an IANA name).
	TimeZone string
	// At is the sign-in's time; the session ends at At+Lifetime, or Idle
	// after its last use if sooner.
	At       time.Time
	Idle     time.Duration
	Lifetime time.Duration
	// PerKey caps the key's sessions: opening one more closes the key's
	// least recently used.
	PerKey int
}

// SessionUse is one use of a session: its lookup at At, which keeps it
// alive for Idle more (at most until its lifetime ends).
type SessionUse struct {
	TokenHash []byte
	At        time.Time
	Idle      time.Duration
	// Poll is a request the page made by itself (a live part's refresh):
	// it reads the session without counting as a use, so the idle end
	// stays where the person's last request put it.
	Poll bool
}

// Session is an open session whose key still works.
type Session struct {
	// Principal is its key's, as Authenticate returns it now.
	Principal Principal
	TimeZone  string
	// Flash is the message for the next page, as the console encoded it
	// (empty: none).
	Flash string
}
