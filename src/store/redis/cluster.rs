//! Redis Cluster: which hash slot a command's key is in, a pipeline split into one pipeline
//! per slot (a cluster refuses commands of several slots in one), and the cluster as its nodes
//! describe it (`CLUSTER NODES`: which master serves which slots, which nodes are up).

use redis::{Arg, Cmd, Pipeline};

/// Hash slots in a cluster.
const SLOTS: u16 = 16384;

/// The hash slot of `key`: of its hash tag (what is between the first `{` and the next `}`,
/// when not empty), else of the whole key.
pub(super) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % SLOTS
}

/// The key a command of the store names first, if any: the first key of a script run, the
/// first argument of the others, none for the commands on the server itself.
pub(super) fn key_of(cmd: &Cmd) -> Option<Vec<u8>> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|arg| match arg {
            Arg::Simple(arg) => Some(arg),
            _ => None,
        })
        .collect();
    let name = args.first()?.to_ascii_uppercase();
    match name.as_slice() {
        b"EVAL" | b"EVALSHA" => {
            let keys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            (keys > 0).then(|| args.get(3).map(|key| key.to_vec()))?
        }
        b"SCRIPT" | b"PING" | b"CLUSTER" | b"TIME" | b"INFO" => None,
        _ => args.get(1).map(|key| key.to_vec()),
    }
}

/// One pipeline per hash slot, of the commands whose key is in it, with where each of its
/// answers goes in the whole pipeline's. The commands that name no key (a script loaded) go
/// first in each; their answers are taken from the first.
pub(super) fn split(pipeline: &Pipeline) -> Vec<(Option<u16>, Pipeline, Vec<Option<usize>>)> {
    let keys: Vec<Option<Vec<u8>>> = pipeline.cmd_iter().map(key_of).collect();
    let keyless: Vec<(usize, &Cmd)> = pipeline
        .cmd_iter()
        .enumerate()
        .filter(|(at, _)| keys[*at].is_none())
        .collect();
    let mut parts: Vec<(Option<u16>, Pipeline, Vec<Option<usize>>)> = Vec::new();
    for (at, cmd) in pipeline.cmd_iter().enumerate() {
        let Some(key) = &keys[at] else { continue };
        let slot = Some(slot(key));
        let part = match parts.iter().position(|(s, _, _)| *s == slot) {
            Some(part) => part,
            None => {
                let first = parts.is_empty();
                let mut sub = redis::pipe();
                let mut places = Vec::new();
                for (keyless_at, keyless_cmd) in &keyless {
                    sub.add_command((*keyless_cmd).clone());
                    places.push(first.then_some(*keyless_at));
                }
                parts.push((slot, sub, places));
                parts.len() - 1
            }
        };
        parts[part].1.add_command(cmd.clone());
        parts[part].2.push(Some(at));
    }
    if parts.is_empty() {
        let places = (0..keyless.len()).map(Some).collect();
        parts.push((None, pipeline.clone(), places));
    }
    parts
}

/// The cluster as `CLUSTER NODES` tells it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct View {
    /// Each master serving slots: its address and its slot ranges, in slot order.
    pub masters: Vec<(String, Vec<(u16, u16)>)>,
    /// Every node's address, and whether it is up (not failed, its link connected).
    pub nodes: Vec<(String, bool)>,
}

impl View {
    /// Reads `CLUSTER NODES`' answer: a line per node (`<id> <ip:port@cport[,host]> <flags>
    /// <master> <ping> <pong> <epoch> <link> <slot or range>…`).
    pub fn parse(text: &str) -> View {
        let mut view = View::default();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, address, flags, _, _, _, _, link, slots @ ..] = fields.as_slice() else {
                continue;
            };
            let address = address.split(['@', ',']).next().unwrap_or_default();
            let flags: Vec<&str> = flags.split(',').collect();
            let failed = flags
                .iter()
                .any(|f| f.starts_with("fail") || *f == "noaddr");
            view.nodes
                .push((address.to_owned(), !failed && *link == "connected"));
            let ranges: Vec<(u16, u16)> = slots
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| {
                    let (from, to) = s.split_once('-').unwrap_or((s, s));
                    Some((from.parse().ok()?, to.parse().ok()?))
                })
                .collect();
            if flags.contains(&"master") && !failed && !ranges.is_empty() {
                view.masters.push((address.to_owned(), ranges));
            }
        }
        view.masters
            .sort_by_key(|(_, ranges)| ranges.first().copied());
        view.nodes.sort();
        view
    }

    /// The master serving `slot`, if one does.
    pub fn master_of(&self, slot: u16) -> Option<&str> {
        self.masters
            .iter()
            .find(|(_, ranges)| ranges.iter().any(|&(from, to)| (from..=to).contains(&slot)))
            .map(|(address, _)| address.as_str())
    }

    /// The masters and what they serve, in one line (a change of master changes it).
    pub fn shown(&self) -> String {
        self.masters
            .iter()
            .map(|(address, ranges)| {
                let ranges: Vec<String> = ranges.iter().map(|(f, t)| format!("{f}-{t}")).collect();
                format!("{address}={}", ranges.join("+"))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // Values from the cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(
            slot(b"foo{}{bar}"),
            slot(b"foo{}{bar}"),
            "an empty tag is no tag"
        );
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn a_pipeline_is_split_per_slot_with_its_script_loaded_in_each() {
        let mut pipe = redis::pipe();
        pipe.cmd("SCRIPT").arg("LOAD").arg("return 1").ignore();
        pipe.cmd("EVALSHA")
            .arg("sha")
            .arg(1)
            .arg("ns:s:session:{a}");
        pipe.cmd("EVALSHA")
            .arg("sha")
            .arg(1)
            .arg("ns:s:session:{b}");
        pipe.cmd("ZADD").arg("ns:s:principal:p").arg(0).arg("a");
        pipe.cmd("EVALSHA")
            .arg("sha")
            .arg(2)
            .arg("ns:s:log:{a}")
            .arg("x");
        let parts = split(&pipe);
        assert_eq!(parts.len(), 3);
        let places: Vec<Vec<Option<usize>>> = parts.iter().map(|(_, _, p)| p.clone()).collect();
        assert_eq!(
            places,
            [
                vec![Some(0), Some(1), Some(4)],
                vec![None, Some(2)],
                vec![None, Some(3)],
            ]
        );
        assert_eq!(parts[0].0, Some(slot(b"a")));
    }

    #[test]
    fn the_nodes_answer_names_masters_their_slots_and_who_is_up() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@40003 master - 0 1426238318243 3 connected 10923-16383
6ec2 127.0.0.1:30005@40005 master,fail - 1426238316232 1426238316232 5 disconnected
e7d1 127.0.0.1:30001@40001,host myself,master - 0 0 1 connected 0-5460 [5461-<-67ed]
";
        let view = View::parse(text);
        assert_eq!(view.master_of(0), Some("127.0.0.1:30001"));
        assert_eq!(view.master_of(5461), Some("127.0.0.1:30002"));
        assert_eq!(view.master_of(16383), Some("127.0.0.1:30003"));
        assert!(view.nodes.contains(&("127.0.0.1:30005".into(), false)));
        assert!(view.nodes.contains(&("127.0.0.1:30004".into(), true)));
        assert_eq!(
            view.shown(),
            "127.0.0.1:30001=0-5460 127.0.0.1:30002=5461-10922 127.0.0.1:30003=10923-16383"
        );
    }
}
