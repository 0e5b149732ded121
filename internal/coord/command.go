package coord

// The state machine's commands: what each changes in the State (Apply and
// its checks), how one is built (a constructor per operation) and how it
// is encoded in the coordinators' raft log (versioned JSON; the versions
// are described with the snapshot's in state.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/shardmap"
)

// Command operations.
const (
	OpSetConfig      = "set_config"
	OpRegisterNode   = "register_node"
	OpRemoveNode     = "remove_node"
	OpNewGeneration  = "new_generation"
	OpClaim          = "claim"
	OpRecoveryDone   = "recovery_done"
	OpExclude        = "exclude"
	OpExcludeFailed  = "exclude_failed"
	OpInclude        = "include"
	OpConfigure      = "configure"
	OpRetire         = "retire"
	OpSetLogReplicas = "set_log_replicas"
)

// Configure keys.
const (
	KeyFailureWait = "failure_wait" // cluster-wide: a Go duration ≥ 0, or "default"
	KeyReplication = "replication"  // per pool: 1 to the pool's slots, or "default"
)

// MaxExcludeAddrs bounds the addresses of one Exclude or Include.
const MaxExcludeAddrs = 1000

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
	// RegisterNode of a stash node: its stash starts with no data.
	Empty bool `json:"empty,omitempty"`
	// Exclude, Include: addresses; Include with none includes every one.
	Addrs []string `json:"addrs,omitempty"`
	// Configure: Key = Value, for Pool if the key is per pool.
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
	Pool  string `json:"pool,omitempty"`
	// Retire: the tag.
	Tag uint32 `json:"tag,omitempty"`
	// ExcludeFailed: the slot tags to retire and give up.
	Tags []uint32 `json:"tags,omitempty"`
	// SetLogReplicas: node ids and raft ids of the log's members.
	Replicas []string `json:"replicas,omitempty"`
	LogIDs   []string `json:"log_ids,omitempty"`
	// Auth: a change of the cluster's roles.
	Auth *AuthChange `json:"auth,omitempty"`

	// version is the encoding version the command was decoded from (0:
	// built in this binary): version 1 and 2 registrations apply as those
	// binaries applied them, so replicas replaying an old log agree.
	version int
}

// SetConfig stores the cluster configuration unless one is stored; then
// the cluster layout of toml must match it (config.CheckSameCluster) and
// the stored text stays.
func SetConfig(toml string) Command { return Command{Op: OpSetConfig, Config: toml} }

// RegisterNode registers n, or updates its address and locality: a stash
// node whose stash keeps its data (RegisterStash with empty false).
func RegisterNode(n NodeInfo) Command { return Command{Op: OpRegisterNode, Node: &n} }

// RegisterStash registers n; empty says its stash starts with no data (a
// dram stash always, a durable one with a fresh directory). A stash node
// gets a slot of its pool and the slot's tag (Result.Slot, Result.Tag):
//
//   - a node holding a slot keeps it; the slot gets a fresh tag if its tag
//     is retired, or if the node is empty and the tag served before (the
//     shard map may name that tag for data the node no longer has) —
//     unless the registration comes from the node's last registered
//     incarnation (NodeInfo.Incarnation): a retry of the same process,
//     whose first registration was applied but not answered, keeps the
//     tag it took then;
//   - another node takes a free slot, with a fresh tag if the slot's tag
//     served before or is retired (a new node never takes another stash's
//     identity), or, with no free slot, a new slot appended to the pool
//     with a fresh tag (up to config.MaxStashesPerPool slots).
//
// The tag is marked used (State.UsedTags). A registration of any node
// from an earlier incarnation than the node's last registered one (a
// process killed with its registration in flight, applied after its
// successor's) is refused and changes nothing.
func RegisterStash(n NodeInfo, empty bool) Command {
	return Command{Op: OpRegisterNode, Node: &n, Empty: empty}
}

// Exclude adds addrs ("host:port") to State.Excluded: the data distributor
// moves the shards of the stashes there onto others.
func Exclude(addrs []string) Command { return Command{Op: OpExclude, Addrs: slices.Clone(addrs)} }

// ExcludeFailed declares the stashes at addrs gone for good (distash cli
// exclude --failed): each address is excluded and recorded in
// State.Failed; the tags among down, held by the slots of stash nodes at
// one of them, are retired; those tags, and every tag retired while its
// node was at one of them (State.RetiredAt), are given up
// (State.GivenUp). The controller passes as down the slot tags of the
// nodes there that it does not hear from (DownSlotTags): a stash whose
// node is alive keeps its tag and data. The data distributor then
// re-replicates the shards that have another replica at once, and starts a
// durable shard whose replicas are all retired, one of them given up,
// empty on a new team instead of holding it: the operator's word that its
// data is lost.
func ExcludeFailed(addrs []string, down []uint32) Command {
	return Command{Op: OpExcludeFailed, Addrs: slices.Clone(addrs), Tags: slices.Clone(down)}
}

// DownSlotTags returns the tags of the slots held by stash nodes at addrs
// for which alive is false, and the addresses among addrs where a stash
// node is alive.
func (s *State) DownSlotTags(addrs []string, alive func(id string) bool) (down []uint32, live []string) {
	for pool, ids := range s.Tags {
		for i, id := range ids {
			addr := s.Nodes[id].Addr
			if id == "" || !slices.Contains(addrs, addr) {
				continue
			}
			if alive(id) {
				live = insertSorted(live, addr)
			} else if t := s.SlotTag(pool, i); t != 0 {
				down = insertSorted(down, t)
			}
		}
	}
	return down, live
}

// Include removes addrs from State.Excluded (and State.Failed); no addresses, or the one
// address "all", include every excluded address. An address that is not
// excluded is no error.
func Include(addrs []string) Command { return Command{Op: OpInclude, Addrs: slices.Clone(addrs)} }

// Configure sets a cluster-wide setting: KeyFailureWait to a Go duration
// ≥ 0 ("5s"), or "default" for the configuration's.
func Configure(key, value string) Command { return Command{Op: OpConfigure, Key: key, Value: value} }

// ConfigurePool sets a setting of one pool: KeyReplication to an integer
// from 1 to the pool's number of slots, or "default" for the
// configuration's.
func ConfigurePool(pool, key, value string) Command {
	return Command{Op: OpConfigure, Pool: pool, Key: key, Value: value}
}

// ParseConfigure turns `distash cli configure` words into a command:
// "failure_wait=5s", or "pool=NAME" and "replication=N" (in either order).
// It checks what needs no cluster state; Apply checks the rest.
func ParseConfigure(words []string) (Command, error) {
	kv := map[string]string{}
	var order []string
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return Command{}, fmt.Errorf("configure: %q is not KEY=VALUE", w)
		}
		if _, dup := kv[k]; dup {
			return Command{}, fmt.Errorf("configure: %s given twice", k)
		}
		kv[k] = v
		order = append(order, k)
	}
	var c Command
	switch {
	case len(words) == 0:
		return Command{}, fmt.Errorf("configure: nothing to set: want %s=DURATION or pool=NAME %s=N", KeyFailureWait, KeyReplication)
	case len(kv) == 1 && order[0] == KeyFailureWait:
		c = Configure(KeyFailureWait, kv[KeyFailureWait])
	case len(kv) == 2 && kv["pool"] != "" && hasKey(kv, KeyReplication):
		c = ConfigurePool(kv["pool"], KeyReplication, kv[KeyReplication])
	default:
		for _, k := range order {
			if k != KeyFailureWait && k != KeyReplication && k != "pool" {
				return Command{}, fmt.Errorf("configure: unknown key %q: want %s=DURATION or pool=NAME %s=N", k, KeyFailureWait, KeyReplication)
			}
		}
		if hasKey(kv, "pool") && kv["pool"] == "" {
			return Command{}, errors.New("configure: pool= needs a pool name")
		}
		return Command{}, fmt.Errorf("configure: want %s=DURATION alone, or pool=NAME with %s=N (got %s)", KeyFailureWait, KeyReplication, strings.Join(words, " "))
	}
	if _, _, err := checkConfigureValue(c); err != nil {
		return Command{}, err
	}
	return c, nil
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// checkConfigureValue checks c's key and value on their own, and returns
// the value: failure_wait in milliseconds, or replication; def is true for
// "default".
func checkConfigureValue(c Command) (v int64, def bool, err error) {
	switch {
	case c.Key == KeyFailureWait && c.Pool == "":
		if c.Value == "default" {
			return 0, true, nil
		}
		d, err := time.ParseDuration(c.Value)
		if err != nil {
			return 0, false, fmt.Errorf("configure: %s=%q: not a duration such as 5s or 1m30s", KeyFailureWait, c.Value)
		}
		if d < 0 {
			return 0, false, fmt.Errorf("configure: %s=%q: negative", KeyFailureWait, c.Value)
		}
		return d.Milliseconds(), false, nil
	case c.Key == KeyReplication && c.Pool != "":
		if c.Value == "default" {
			return 0, true, nil
		}
		n, err := strconv.Atoi(c.Value)
		if err != nil {
			return 0, false, fmt.Errorf("configure: pool=%s %s=%q: not an integer", c.Pool, KeyReplication, c.Value)
		}
		if n < 1 {
			return 0, false, fmt.Errorf("configure: pool=%s %s=%d: at least 1", c.Pool, KeyReplication, n)
		}
		return int64(n), false, nil
	case c.Key == KeyFailureWait:
		return 0, false, fmt.Errorf("configure: %s is cluster-wide: give no pool (got pool=%s)", KeyFailureWait, c.Pool)
	case c.Key == KeyReplication:
		return 0, false, fmt.Errorf("configure: %s is per pool: give pool=NAME", KeyReplication)
	}
	return 0, false, fmt.Errorf("configure: unknown key %q: want %s or %s", c.Key, KeyFailureWait, KeyReplication)
}

// Retire retires tag: the data distributor calls it once no shard refers
// to it. The node whose slot holds it gets a fresh tag when it registers
// next. Retiring a tag never given is an error; retiring one again is not.
func Retire(tag uint32) Command { return Command{Op: OpRetire, Tag: tag} }

// SetLogReplicas records the log's raft membership after a change made
// through the log's raft (a lost replica replaced): replicas are node ids,
// ids their raft server ids. The generation stays: the log's epoch does
// not change with its membership. Every replica must be a registered
// transaction node, and the node holding the stateless roles, if any,
// must stay one of them.
func SetLogReplicas(replicas, ids []string) Command {
	return Command{Op: OpSetLogReplicas, Replicas: slices.Clone(replicas), LogIDs: slices.Clone(ids)}
}

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
	Tag        uint32 // RegisterNode of a stash node: its slot's tag; else 0
}

// ErrStaleGeneration refuses a NewGeneration whose From is not current.
var ErrStaleGeneration = errors.New("coord: stale generation")

// Apply applies c to s. On error s is unchanged: every check comes before
// the first change. Apply is deterministic (every replica computes the
// same state) and depends on nothing but s and c.
func (s *State) Apply(c Command) (Result, error) {
	res := Result{Generation: s.Generation, Slot: -1}
	// A state decoded from an old encoding gets its tags before any change
	// (DecodeState does it too; this covers a State built by hand).
	if err := s.deriveTags(); err != nil {
		return res, err
	}
	switch c.Op {
	case OpSetConfig:
		return res, s.setConfig(c.Config)
	case OpRegisterNode:
		if c.Node == nil {
			return res, errors.New("coord: register_node without a node")
		}
		slot, tag, err := s.register(*c.Node, c.Empty, c.version != 0 && c.version < 3)
		res.Slot, res.Tag = slot, tag
		return res, err
	case OpAuth:
		return res, s.applyAuth(c.Auth)
	case OpExclude:
		addrs, err := checkAddrs(c.Addrs, false)
		if err != nil {
			return res, err
		}
		for _, a := range addrs {
			s.Excluded = insertSorted(s.Excluded, a)
		}
		return res, nil
	case OpExcludeFailed:
		addrs, err := checkAddrs(c.Addrs, false)
		if err != nil {
			return res, err
		}
		for _, a := range addrs {
			s.Excluded = insertSorted(s.Excluded, a)
			s.Failed = insertSorted(s.Failed, a)
		}
		s.giveUp(addrs, c.Tags)
		return res, nil
	case OpInclude:
		if len(c.Addrs) == 0 || len(c.Addrs) == 1 && c.Addrs[0] == "all" {
			s.Excluded, s.Failed = nil, nil
			return res, nil
		}
		addrs, err := checkAddrs(c.Addrs, true)
		if err != nil {
			return res, err
		}
		s.Excluded = slices.DeleteFunc(s.Excluded, func(a string) bool { return slices.Contains(addrs, a) })
		if len(s.Excluded) == 0 {
			s.Excluded = nil
		}
		s.Failed = slices.DeleteFunc(s.Failed, func(a string) bool { return slices.Contains(addrs, a) })
		if len(s.Failed) == 0 {
			s.Failed = nil
		}
		return res, nil
	case OpConfigure:
		return res, s.configure(c)
	case OpRetire:
		if c.Tag <= uint32(shardmap.SystemTag) || c.Tag >= s.NextTag {
			given := "no tag was given yet"
			if s.NextTag > uint32(shardmap.SystemTag)+1 {
				given = fmt.Sprintf("tags given are %d to %d", shardmap.SystemTag+1, s.NextTag-1)
			}
			return res, fmt.Errorf("coord: retire: tag %d was never given to a stash (%s)", c.Tag, given)
		}
		s.retire(c.Tag, s.tagAddr(c.Tag))
		return res, nil
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
		if len(c.Roles.LogReplicas) > 0 && !slices.Equal(c.Roles.LogReplicas, s.Roles.LogReplicas) {
			// A new placement: the log forms with these ids.
			s.LogBootstrap = nil
			for i := range c.Roles.LogReplicas {
				s.LogBootstrap = append(s.LogBootstrap, c.Roles.LogID(i))
			}
		}
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
			CommitProxies: []string{c.ID}, Resolver: c.ID, LogReplicas: s.Roles.LogReplicas, LogIDs: s.Roles.LogIDs}
		s.Recovery = &Recovery{Generation: s.Generation, Node: c.ID, ClaimedUnixMs: c.UnixMs}
		res.Generation = s.Generation
		return res, nil
	case OpSetLogReplicas:
		if len(c.Replicas) == 0 || len(c.Replicas) != len(c.LogIDs) {
			return res, fmt.Errorf("coord: set_log_replicas: %d replicas and %d raft ids", len(c.Replicas), len(c.LogIDs))
		}
		for i, id := range c.Replicas {
			if n, ok := s.Nodes[id]; !ok || n.Class != ClassTransaction {
				return res, fmt.Errorf("coord: set_log_replicas: %q is not a registered transaction node", id)
			}
			if c.LogIDs[i] == "" || slices.Index(c.Replicas, id) != i || slices.Index(c.LogIDs, c.LogIDs[i]) != i {
				return res, fmt.Errorf("coord: set_log_replicas: replica %q (raft id %q) is empty or repeated", id, c.LogIDs[i])
			}
		}
		if r := s.Roles.Sequencer; r != "" && !slices.Contains(c.Replicas, r) {
			return res, fmt.Errorf("coord: set_log_replicas: %q holds the stateless roles and must stay a log replica", r)
		}
		for _, old := range s.Roles.LogReplicas {
			// A node that left the log and whose address another node
			// registered since is gone for good (two nodes cannot listen
			// on one address): forgotten, so status stops listing it.
			if n, ok := s.Nodes[old]; ok && !slices.Contains(c.Replicas, old) && s.addrTaken(n) {
				delete(s.Nodes, old)
			}
		}
		s.Roles.LogReplicas, s.Roles.LogIDs = slices.Clone(c.Replicas), slices.Clone(c.LogIDs)
		return res, nil
	case OpRecoveryDone:
		if s.RecoveryAccepted(c.ID, c.Generation) {
			s.Recovery.Micros = c.Micros
		}
		return res, nil
	}
	return res, fmt.Errorf("coord: unknown command %q", c.Op)
}

// addrTaken reports whether another registered node has n's address.
func (s *State) addrTaken(n NodeInfo) bool {
	for id, o := range s.Nodes {
		if id != n.ID && o.Addr == n.Addr {
			return true
		}
	}
	return false
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
	s.SlotTags = nil
	return s.deriveTags()
}

// checkAddrs checks the addresses of an Exclude or Include: each is
// host:port. It returns them without duplicates.
func checkAddrs(addrs []string, include bool) ([]string, error) {
	verb := "exclude"
	if include {
		verb = "include"
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("coord: %s: no address given", verb)
	}
	if len(addrs) > MaxExcludeAddrs {
		return nil, fmt.Errorf("coord: %s: %d addresses (limit %d)", verb, len(addrs), MaxExcludeAddrs)
	}
	var out []string
	for _, a := range addrs {
		if a == "all" && include {
			return nil, errors.New(`coord: include: "all" stands alone: it includes every excluded address`)
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("coord: %s: address %q is not host:port", verb, a)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// configure applies a Configure command.
func (s *State) configure(c Command) error {
	v, def, err := checkConfigureValue(c)
	if err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	if s.Config == "" {
		return errors.New("coord: configure: the cluster has no configuration yet")
	}
	switch c.Key {
	case KeyFailureWait:
		if def {
			s.FailureWaitMs = nil
		} else {
			s.FailureWaitMs = &v
		}
	case KeyReplication:
		slots, ok := s.Tags[c.Pool]
		if !ok {
			pools := slices.Sorted(maps.Keys(s.Tags))
			return fmt.Errorf("coord: configure: pool=%s: no such pool (pools: %s)", c.Pool, strings.Join(pools, ", "))
		}
		if def {
			delete(s.Replication, c.Pool)
			if len(s.Replication) == 0 {
				s.Replication = nil
			}
			return nil
		}
		if v > int64(len(slots)) {
			return fmt.Errorf("coord: configure: pool=%s %s=%d: the pool has %d stash slots, so at most %d", c.Pool, KeyReplication, v, len(slots), len(slots))
		}
		if s.Replication == nil {
			s.Replication = make(map[string]int)
		}
		s.Replication[c.Pool] = int(v)
	}
	return nil
}

func (s *State) register(n NodeInfo, empty, legacy bool) (int, uint32, error) {
	if n.ID == "" || n.Addr == "" {
		return -1, 0, errors.New("coord: a node needs an id and an address")
	}
	if s.Config == "" {
		return -1, 0, errors.New("coord: no cluster configuration yet: set it before registering nodes")
	}
	switch n.Class {
	case ClassTransaction:
		if n.Pool != "" {
			return -1, 0, fmt.Errorf("coord: node %q: a transaction node has no pool (got %q)", n.ID, n.Pool)
		}
	case ClassStash:
		if _, ok := s.Tags[n.Pool]; !ok {
			return -1, 0, fmt.Errorf("coord: node %q: no pool %q in the cluster configuration", n.ID, n.Pool)
		}
	default:
		return -1, 0, fmt.Errorf("coord: node %q: class %q is not %s or %s", n.ID, n.Class, ClassTransaction, ClassStash)
	}
	if old, ok := s.Nodes[n.ID]; ok && !legacy && staleIncarnation(n.Incarnation, old.Incarnation) {
		// A registration that a process of this node sent before it was
		// killed, applied after its successor registered: it must not
		// undo the successor's (give the slot a fresh tag, retiring the
		// one the successor serves, or put back an old address).
		return -1, 0, fmt.Errorf("coord: node %q: registration of an earlier process of the node (incarnation %s) after a later one (%s) registered: ignored",
			n.ID, n.Incarnation, old.Incarnation)
	}
	if old, ok := s.Nodes[n.ID]; ok && (old.Class != n.Class || old.Pool != n.Pool) {
		return -1, 0, fmt.Errorf("coord: node %q is registered as %s (pool %q), not %s (pool %q); remove it first",
			n.ID, old.Class, old.Pool, n.Class, n.Pool)
	}
	slot, tag := -1, uint32(0)
	if n.Class == ClassStash {
		tags := s.Tags[n.Pool]
		slotTags := s.SlotTags[n.Pool]
		if len(slotTags) != len(tags) {
			return -1, 0, fmt.Errorf("coord: pool %q has %d slots but %d slot tags: corrupt state", n.Pool, len(tags), len(slotTags))
		}
		fresh := false
		if slot = slices.Index(tags, n.ID); slot >= 0 {
			t := slotTags[slot]
			// The same process again (a retry of a registration applied
			// while its answer was lost) already took t with its data, so
			// empty or not it keeps it; only a new process that comes
			// back empty gets a fresh tag.
			again := n.Incarnation != "" && s.Nodes[n.ID].Incarnation == n.Incarnation
			fresh = !legacy && (s.TagRetired(t) || empty && s.TagUsed(t) && !again)
		} else if slot = slices.Index(tags, ""); slot >= 0 {
			t := slotTags[slot]
			fresh = !legacy && (s.TagRetired(t) || s.TagUsed(t))
		} else {
			// Every slot is taken: the pool grows by one.
			switch {
			case legacy:
				return -1, 0, fmt.Errorf("coord: node %q: pool %q has all %d stash slots taken (%v)", n.ID, n.Pool, len(tags), tags)
			case len(tags) >= config.MaxStashesPerPool:
				return -1, 0, fmt.Errorf("coord: node %q: pool %q has all %d stash slots taken, the most a pool may have (config.MaxStashesPerPool)", n.ID, n.Pool, len(tags))
			}
			slot = len(tags)
			s.Tags[n.Pool] = append(tags, "")
			s.SlotTags[n.Pool] = append(slotTags, 0)
			fresh = true
		}
		s.Tags[n.Pool][slot] = n.ID
		if fresh {
			// The tag the slot had will never serve again (its stash
			// lost its data, or was replaced): retired, so the data
			// distributor re-replicates its shards without waiting.
			if old := s.SlotTags[n.Pool][slot]; old != 0 && s.TagUsed(old) && !s.TagRetired(old) {
				addr := n.Addr
				if prev, ok := s.Nodes[n.ID]; ok {
					addr = prev.Addr // where the stash that had the tag was
				}
				s.retire(old, addr)
			}
			s.SlotTags[n.Pool][slot] = s.freshTag()
		}
		tag = s.SlotTags[n.Pool][slot]
		s.UsedTags = insertSorted(s.UsedTags, tag)
	}
	if s.Nodes == nil {
		s.Nodes = make(map[string]NodeInfo)
	}
	s.Nodes[n.ID] = n // a restarted node may come back on a new address
	return slot, tag, nil
}

// retire retires tag, which the stash node at addr ("" if none) held.
func (s *State) retire(tag uint32, addr string) {
	s.Retired = insertSorted(s.Retired, tag)
	if addr != "" {
		if s.RetiredAt == nil {
			s.RetiredAt = make(map[uint32]string)
		}
		s.RetiredAt[tag] = addr
	}
}

// tagAddr returns the address of the stash node whose slot holds tag, ""
// if no node holds it.
func (s *State) tagAddr(tag uint32) string {
	for pool, tags := range s.SlotTags {
		if i := slices.Index(tags, tag); i >= 0 && i < len(s.Tags[pool]) && s.Tags[pool][i] != "" {
			return s.Nodes[s.Tags[pool][i]].Addr
		}
	}
	return ""
}

// giveUp retires and gives up each of tags held by the slot of a stash
// node at one of addrs, and gives up every tag retired while its node was
// at one of them (ExcludeFailed).
func (s *State) giveUp(addrs []string, tags []uint32) {
	for _, t := range tags {
		if addr := s.tagAddr(t); addr != "" && slices.Contains(addrs, addr) && s.TagUsed(t) {
			if !s.TagRetired(t) {
				s.retire(t, addr)
			}
			s.GivenUp = insertSorted(s.GivenUp, t)
		}
	}
	for t, a := range s.RetiredAt {
		if slices.Contains(addrs, a) {
			s.GivenUp = insertSorted(s.GivenUp, t)
		}
	}
}

// staleIncarnation reports whether incarnation inc ("<seq>.<random>",
// server.newIncarnation) names an earlier start of a node than last, the
// one that registered last. Names of other forms (a release before the
// sequence) order nothing.
func staleIncarnation(inc, last string) bool {
	a, ok := incarnationSeq(inc)
	if !ok {
		return false
	}
	b, ok := incarnationSeq(last)
	return ok && a < b
}

func incarnationSeq(inc string) (uint64, bool) {
	seq, _, ok := strings.Cut(inc, ".")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	return n, err == nil
}

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
	e.Command.version = e.V
	return e.Command, nil
}
