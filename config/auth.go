package config

import "fmt"

// Auth is the [auth] table: who may do what (docs/security.md). A
// configuration without it runs the cluster in trusted-network mode: every
// connection may do everything, as before authorization existed.
type Auth struct {
	// Identity says which field of a verified client certificate names
	// the client: "cn" (subject common name, the default), "san-uri" or
	// "san-dns" (its first URI or DNS subject alternative name).
	Identity string `toml:"identity"`
	// TokenKeys are files of PEM public keys (Ed25519, ECDSA or RSA) that
	// sign the bearer tokens (JWT) the cluster accepts; a key's id (the
	// token's "kid") is its file name without the extension. Files are
	// read again when they change, so keys rotate without a restart.
	TokenKeys []string `toml:"token_keys,omitempty"`
	// Roles are the roles the cluster is created with; afterwards they
	// change live with `distash cli auth`.
	Roles []Role `toml:"role"`
}

// Role is one [[auth.role]]: its members and what they may do.
type Role struct {
	Name    string   `toml:"name" json:"name"`
	Members []string `toml:"members" json:"members,omitempty"` // certificate identities or token subjects
	Read    []string `toml:"read" json:"read,omitempty"`       // pool names
	Write   []string `toml:"write" json:"write,omitempty"`     // pool names
	Status  bool     `toml:"status" json:"status,omitempty"`   // status, status json, /metrics, the console; reads of the system key space
	Admin   bool     `toml:"admin" json:"admin,omitempty"`     // exclude, include, kill, configure, auth changes, backup and restore; reads of the system key space
}

// Identity fields a certificate names its client by ([auth] identity).
const (
	IdentityCN     = "cn"
	IdentitySANURI = "san-uri"
	IdentitySANDNS = "san-dns"
)

// IdentityFields are the values of [auth] identity.
var IdentityFields = []string{IdentityCN, IdentitySANURI, IdentitySANDNS}

// validateAuth checks [auth]: identity in its set, roles named uniquely
// (a-z 0-9 _ -), members non-empty strings, read and write naming pools of
// this configuration, token key files named.
func (c *Config) validateAuth(fail func(field, format string, args ...any)) {
	a := c.Auth
	if a == nil {
		return
	}
	if !oneOf(a.Identity, IdentityFields) {
		fail("auth.identity", "%s", enumError(a.Identity, IdentityFields))
	}
	for i, f := range a.TokenKeys {
		if f == "" {
			fail(fmt.Sprintf("auth.token_keys[%d]", i), "empty file name")
		}
	}
	names := map[string]int{}
	for i, r := range a.Roles {
		at := fmt.Sprintf("auth.role[%d]", i)
		if r.Name != "" {
			at = fmt.Sprintf("auth.role[%d] (%q)", i, r.Name)
		}
		switch {
		case r.Name == "":
			fail(at+".name", "missing")
		case !validName(r.Name):
			fail(at+".name", "%q may only contain a-z, 0-9, _ and -", r.Name)
		default:
			if j, dup := names[r.Name]; dup {
				fail(at+".name", "duplicate: auth.role[%d] has the same name", j)
			}
			names[r.Name] = i
		}
		for j, m := range r.Members {
			if m == "" {
				fail(fmt.Sprintf("%s.members[%d]", at, j), "empty identity")
			}
		}
		for _, list := range []struct {
			key   string
			pools []string
		}{{"read", r.Read}, {"write", r.Write}} {
			for j, p := range list.pools {
				if _, ok := c.PoolByName(p); !ok {
					fail(fmt.Sprintf("%s.%s[%d]", at, list.key, j), "no pool named %q", p)
				}
			}
		}
	}
}
