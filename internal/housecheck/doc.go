// Package housecheck holds the tree's house checks as tests: rules about
// the code's shape rather than its behaviour (which packages may link
// what), so they cannot regress unnoticed. docs/development.md ("House
// checks") lists the same checks as commands.
package housecheck
