package webhooks

import (
	"os"
	"testing"

	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testKeys seal the tests' webhook secrets.
var testKeys = func() *keyring.Ring {
	r, err := keyring.Parse("test:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	if err != nil {
		panic(err)
	}
	return r
}()
