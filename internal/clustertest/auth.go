package clustertest

// AuthMatrixRoles are the [[auth.role]] tables of the authorization tests
// (the server's RPC matrix, the CLI's every-verb test), one identity for
// each side of every permission on a pool "cache": app1 reads and writes
// it, app3 only reads it, alice is an operator (admin), prom monitors
// (status), root has every client permission (but is no node); an
// identity such as mallory is named by no role. A test puts them after
// its own [auth] table.
const AuthMatrixRoles = `
[[auth.role]]
name = "shop"
members = ["app1"]
read = ["cache"]
write = ["cache"]

[[auth.role]]
name = "reader"
members = ["app3"]
read = ["cache"]

[[auth.role]]
name = "operator"
members = ["alice"]
admin = true

[[auth.role]]
name = "monitoring"
members = ["prom"]
status = true

[[auth.role]]
name = "root"
members = ["root"]
read = ["cache"]
write = ["cache"]
status = true
admin = true
`
