package cli

import (
	"os"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
)

// adminTokenHelp is --admin-token's help on the servers (serve, proxy).
const adminTokenHelp = "admin bearer tokens: TOKEN (named admin), NAME:TOKEN, or @FILE of NAME:TOKEN lines; each change is logged under the token's name (default $TOKENLIMIT_ADMIN_TOKEN; empty: admin endpoints off)"

// serverAdminTokens returns the admin tokens by name of a server's
// --admin-token value, else $TOKENLIMIT_ADMIN_TOKEN (read here, not as the
// flag's default, which --help would print); see httpx.ParseAdminTokens.
func serverAdminTokens(value string) (map[string]string, error) {
	if value == "" {
		value = os.Getenv("TOKENLIMIT_ADMIN_TOKEN")
	}
	return httpx.ParseAdminTokens(value, os.ReadFile)
}
