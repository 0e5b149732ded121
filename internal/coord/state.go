package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/distash/distash/config"
)

// Node classes.
const (
	ClassTransaction = "transaction" // hosts log replicas and the stateless roles
	ClassStash       = "stash"       // hosts one stash of one pool
)

// NodeInfo is a registered node of the cluster.
type NodeInfo struct {
	ID      string `json:"id"`
	Addr    string `json:"addr"`
	Class   string `json:"class"`
	Pool    string `json:"pool,omitempty"` // stash nodes only
	DC      string `json:"dc,omitempty"`
	Zone    string `json:"zone,omitempty"`
	Machine string `json:"machine,omitempty"`
}

// Roles is the role assignment of one generation: node ids.
type Roles struct {
	Controller    string   `json:"controller"` // the coordinator address that started the generation
	Sequencer     string   `json:"sequencer,omitempty"`
	GRVProxies    []string `json:"grv_proxies,omitempty"`
	CommitProxies []string `json:"commit_proxies,omitempty"`
	Resolver      string   `json:"resolver,omitempty"`
	LogReplicas   []string `json:"log_replicas,omitempty"`
}

func (r Roles) clone() Roles {
	r.GRVProxies = slices.Clone(r.GRVProxies)
	r.CommitProxies = slices.Clone(r.CommitProxies)
	r.LogReplicas = slices.Clone(r.LogReplicas)
	return r
}

// State is the replicated cluster state. The zero State is a cluster that
// has no configuration yet.
type State struct {
	Config     string              `json:"config,omitempty"` // TOML, as first written
	Generation uint64              `json:"generation"`
	Nodes      map[string]NodeInfo `json:"nodes,omitempty"` // by id
	Roles      Roles               `json:"roles"`           // of Generation
	// Tags holds, per pool, its stash tag slots (the config's stashes count):
	// the id of the stash node holding each, "" for a free slot. A slot is
	// a stash's identity in the shard map and the log, so a returning node
	// keeps its slot.
	Tags map[string][]string `json:"tags,omitempty"`
	// Recovery is the last claim of the stateless roles, while the node
	// that claimed them holds them; nil before the first claim.
	Recovery *Recovery `json:"recovery,omitempty"`
}

// Recovery is a claim of the stateless roles (see Claim) and how long the
// claimer's recovery took.
type Recovery struct {
	Generation    uint64 `json:"generation"` // the generation the claim started
	Node          string `json:"node"`       // the claimer
	ClaimedUnixMs int64  `json:"claimed_unix_ms"`
	// Micros is the recovery's duration as the claimer reported it
	// (RecoveryDone); 0 until it does.
	Micros int64 `json:"micros,omitempty"`
}

// Clone returns a deep copy: readers get a snapshot the FSM will not change.
func (s *State) Clone() *State {
	c := *s
	c.Nodes = maps.Clone(s.Nodes)
	c.Roles = s.Roles.clone()
	if s.Recovery != nil {
		r := *s.Recovery
		c.Recovery = &r
	}
	c.Tags = make(map[string][]string, len(s.Tags))
	for p, t := range s.Tags {
		c.Tags[p] = slices.Clone(t)
	}
	return &c
}

// Slot returns the tag slot of pool held by node id, or -1.
func (s *State) Slot(pool, id string) int {
	return slices.Index(s.Tags[pool], id)
}

// ParsedConfig parses the stored configuration (nil, nil if none yet).
func (s *State) ParsedConfig() (*config.Config, error) {
	if s.Config == "" {
		return nil, nil
	}
	return config.Parse([]byte(s.Config))
}

// Command operations.
const (
	OpSetConfig     = "set_config"
	OpRegisterNode  = "register_node"
	OpRemoveNode    = "remove_node"
	OpNewGeneration = "new_generation"
	OpClaim         = "claim"
	OpRecoveryDone  = "recovery_done"
)

// Command is one change of the State, applied through raft.
type Command struct {
	Op     string    `json:"op"`
	Config string    `json:"config,omitempty"` // SetConfig: TOML
	Node   *NodeInfo `json:"node,omitempty"`   // RegisterNode
	ID     string    `json:"id,omitempty"`     // RemoveNode
	// NewGeneration: From must be the current generation (a controller
	// that read an older state must not start a generation over one it did
	// not see); Roles is the new generation's assignment.
	From  uint64 `json:"from,omitempty"`
	Roles *Roles `json:"roles,omitempty"`
	// Claim: ID claims the stateless roles at UnixMs, in the generation
	// after From. RecoveryDone: ID's recovery of Generation took Micros.
	UnixMs     int64  `json:"unix_ms,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	Micros     int64  `json:"micros,omitempty"`
}

// SetConfig stores the cluster configuration unless one is stored; then
// the cluster layout of toml must match it (config.CheckSameCluster) and
// the stored text stays.
func SetConfig(toml string) Command { return Command{Op: OpSetConfig, Config: toml} }

// RegisterNode registers n, or updates its address and locality.
func RegisterNode(n NodeInfo) Command { return Command{Op: OpRegisterNode, Node: &n} }

// RemoveNode forgets node id and frees its tag slot.
func RemoveNode(id string) Command { return Command{Op: OpRemoveNode, ID: id} }

// NewGeneration starts generation from+1 with roles.
func NewGeneration(from uint64, roles Roles) Command {
	return Command{Op: OpNewGeneration, From: from, Roles: &roles}
}

// Claim starts generation from+1 in which node id holds every stateless
// role (sequencer, GRV and commit proxy, resolver), the log replicas and
// the rest unchanged but for controller, and records the claim's time
// (unix milliseconds). id must be a registered transaction node holding a
// log replica.
func Claim(from uint64, controller, id string, unixMs int64) Command {
	return Command{Op: OpClaim, From: from, Roles: &Roles{Controller: controller}, ID: id, UnixMs: unixMs}
}

// RecoveryDone records that node id's recovery of generation gen took
// micros microseconds. It is ignored (no error) unless gen is the
// generation of the last claim and id made it and still holds the roles.
func RecoveryDone(id string, gen uint64, micros int64) Command {
	return Command{Op: OpRecoveryDone, ID: id, Generation: gen, Micros: micros}
}

// ErrNotLogReplica refuses a claim by a node that holds no log replica.
var ErrNotLogReplica = errors.New("coord: not a log replica")

// Result is what applying a command returns besides an error.
type Result struct {
	Generation uint64 // the generation after the command
	Slot       int    // RegisterNode of a stash node: its tag slot; else -1
}

// ErrStaleGeneration refuses a NewGeneration whose From is not current.
var ErrStaleGeneration = errors.New("coord: stale generation")

// Apply applies c to s. On error s is unchanged: every check comes before
// the first change. Apply is deterministic (every replica computes the
// same state) and depends on nothing but s and c.
func (s *State) Apply(c Command) (Result, error) {
	res := Result{Generation: s.Generation, Slot: -1}
	switch c.Op {
	case OpSetConfig:
		return res, s.setConfig(c.Config)
	case OpRegisterNode:
		if c.Node == nil {
			return res, errors.New("coord: register_node without a node")
		}
		slot, err := s.register(*c.Node)
		res.Slot = slot
		return res, err
	case OpRemoveNode:
		if _, ok := s.Nodes[c.ID]; !ok {
			return res, fmt.Errorf("coord: no node %q", c.ID)
		}
		delete(s.Nodes, c.ID)
		for _, t := range s.Tags {
			if i := slices.Index(t, c.ID); i >= 0 {
				t[i] = ""
			}
		}
		return res, nil
	case OpNewGeneration:
		if c.Roles == nil || c.Roles.Controller == "" {
			return res, errors.New("coord: new_generation without a controller")
		}
		if c.From != s.Generation {
			return res, fmt.Errorf("%w: from %d, but the cluster is at %d", ErrStaleGeneration, c.From, s.Generation)
		}
		s.Generation++
		s.Roles = c.Roles.clone()
		if s.Recovery != nil && !s.holdsStateless(s.Recovery.Node) {
			s.Recovery = nil // the claimer no longer holds the roles
		}
		res.Generation = s.Generation
		return res, nil
	case OpClaim:
		if c.Roles == nil || c.Roles.Controller == "" {
			return res, errors.New("coord: claim without a controller")
		}
		if err := s.claimable(c.ID); err != nil {
			return res, err
		}
		if c.From != s.Generation {
			return res, fmt.Errorf("%w: from %d, but the cluster is at %d", ErrStaleGeneration, c.From, s.Generation)
		}
		s.Generation++
		s.Roles = Roles{Controller: c.Roles.Controller, Sequencer: c.ID, GRVProxies: []string{c.ID},
			CommitProxies: []string{c.ID}, Resolver: c.ID, LogReplicas: s.Roles.LogReplicas}
		s.Recovery = &Recovery{Generation: s.Generation, Node: c.ID, ClaimedUnixMs: c.UnixMs}
		res.Generation = s.Generation
		return res, nil
	case OpRecoveryDone:
		if s.RecoveryAccepted(c.ID, c.Generation) {
			s.Recovery.Micros = c.Micros
		}
		return res, nil
	}
	return res, fmt.Errorf("coord: unknown command %q", c.Op)
}

// claimable checks that node id may claim the stateless roles.
func (s *State) claimable(id string) error {
	n, ok := s.Nodes[id]
	switch {
	case !ok:
		return fmt.Errorf("coord: node %q is not registered", id)
	case n.Class != ClassTransaction:
		return fmt.Errorf("coord: node %q is a %s node, not a %s node: it cannot claim the stateless roles", id, n.Class, ClassTransaction)
	case !slices.Contains(s.Roles.LogReplicas, id):
		return fmt.Errorf("%w: node %q holds none of the log replicas %v, so it cannot claim the stateless roles", ErrNotLogReplica, id, s.Roles.LogReplicas)
	}
	return nil
}

// holdsStateless reports whether node id holds every stateless role.
func (s *State) holdsStateless(id string) bool {
	r := s.Roles
	return id != "" && r.Sequencer == id && r.Resolver == id &&
		slices.Equal(r.GRVProxies, []string{id}) && slices.Equal(r.CommitProxies, []string{id})
}

// RecoveryAccepted reports whether a RecoveryDone of node id for
// generation gen would be recorded: gen is the last claim's, id made it,
// and id holds the stateless roles still.
func (s *State) RecoveryAccepted(id string, gen uint64) bool {
	return s.Recovery != nil && s.Recovery.Generation == gen && s.Recovery.Node == id && s.holdsStateless(id)
}

func (s *State) setConfig(text string) error {
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		return fmt.Errorf("coord: configuration: %w", err)
	}
	if s.Config != "" {
		created, err := s.ParsedConfig()
		if err != nil {
			return fmt.Errorf("coord: stored configuration: %w", err)
		}
		if err := cfg.CheckSameCluster(created); err != nil {
			return fmt.Errorf("coord: configuration differs from the cluster's: %w", err)
		}
		return nil // first write wins
	}
	s.Config = text
	s.Tags = make(map[string][]string, len(cfg.Pools))
	for _, p := range cfg.Pools {
		s.Tags[p.Name] = make([]string, p.Stashes)
	}
	return nil
}

func (s *State) register(n NodeInfo) (int, error) {
	if n.ID == "" || n.Addr == "" {
		return -1, errors.New("coord: a node needs an id and an address")
	}
	if s.Config == "" {
		return -1, errors.New("coord: no cluster configuration yet: set it before registering nodes")
	}
	switch n.Class {
	case ClassTransaction:
		if n.Pool != "" {
			return -1, fmt.Errorf("coord: node %q: a transaction node has no pool (got %q)", n.ID, n.Pool)
		}
	case ClassStash:
		if _, ok := s.Tags[n.Pool]; !ok {
			return -1, fmt.Errorf("coord: node %q: no pool %q in the cluster configuration", n.ID, n.Pool)
		}
	default:
		return -1, fmt.Errorf("coord: node %q: class %q is not %s or %s", n.ID, n.Class, ClassTransaction, ClassStash)
	}
	if old, ok := s.Nodes[n.ID]; ok && (old.Class != n.Class || old.Pool != n.Pool) {
		return -1, fmt.Errorf("coord: node %q is registered as %s (pool %q), not %s (pool %q); remove it first",
			n.ID, old.Class, old.Pool, n.Class, n.Pool)
	}
	slot := -1
	if n.Class == ClassStash {
		tags := s.Tags[n.Pool]
		if slot = slices.Index(tags, n.ID); slot < 0 {
			if slot = slices.Index(tags, ""); slot < 0 {
				return -1, fmt.Errorf("coord: node %q: pool %q has all %d stash slots taken (%v)", n.ID, n.Pool, len(tags), tags)
			}
			tags[slot] = n.ID
		}
	}
	if s.Nodes == nil {
		s.Nodes = make(map[string]NodeInfo)
	}
	s.Nodes[n.ID] = n // a restarted node may come back on a new address
	return slot, nil
}

// Encoding versions: bump when a change is not backward compatible, and
// keep decoding the old ones. Version 2 added the claim and recovery_done
// commands and State.Recovery: version 1 encodings decode as they are, and
// a binary that knows only version 1 refuses version 2 rather than
// dropping what it does not know.
const (
	commandVersion  = 2
	snapshotVersion = 2
)

type commandEnvelope struct {
	V int `json:"v"`
	Command
}

func encodeCommand(c Command) ([]byte, error) {
	return json.Marshal(commandEnvelope{V: commandVersion, Command: c})
}

func decodeCommand(b []byte) (Command, error) {
	var e commandEnvelope
	if err := json.Unmarshal(b, &e); err != nil {
		return Command{}, fmt.Errorf("coord: decode command: %w", err)
	}
	if e.V < 1 || e.V > commandVersion {
		return Command{}, fmt.Errorf("coord: command encoding version %d, want 1 to %d", e.V, commandVersion)
	}
	return e.Command, nil
}

type snapshotEnvelope struct {
	V     int    `json:"v"`
	State *State `json:"state"`
}

// EncodeState returns the versioned encoding of s (raft snapshots).
func EncodeState(s *State) ([]byte, error) {
	return json.Marshal(snapshotEnvelope{V: snapshotVersion, State: s})
}

// DecodeState decodes what EncodeState wrote.
func DecodeState(b []byte) (*State, error) {
	var e snapshotEnvelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("coord: decode state: %w", err)
	}
	if e.V < 1 || e.V > snapshotVersion || e.State == nil {
		return nil, fmt.Errorf("coord: state encoding version %d, want 1 to %d", e.V, snapshotVersion)
	}
	return e.State, nil
}
