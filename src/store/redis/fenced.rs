//! Writes conditional on the owner epoch: every command an owner sends to one session's keys
//! goes through one script run, which first checks that the session's record holds the epoch
//! the owner holds. A replica that was taken over (paused past `owner_timeout`, cut off from
//! Redis) writes nothing after the takeover. The script names only the session's own keys
//! (record, log, requests in flight, subscriptions: `KEYS`), so they can share one slot.

use redis::ToRedisArgs;

use super::RedisStore;

/// KEYS: the session's record, log, requests in flight and subscriptions. ARGV: the epoch the
/// owner holds; `1` when the commands write the whole record (then a missing record is
/// written: a new session, or one Redis lost); then each command as the count of its items,
/// its name, the index in KEYS of its key and its arguments. Runs the commands when the record
/// holds the epoch (each command's own error is left out, as in a pipeline). Returns 1 when
/// written, `REFUSED` (0: another owner's epoch, nothing written) or -1 when the session has no
/// record (nothing written: it ended or expired, or Redis lost it and its owner writes it whole
/// again after the outage).
const SCRIPT: &str = r"
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if epoch then
  if epoch ~= ARGV[1] then return 0 end
elseif ARGV[2] ~= '1' then
  return -1
end
local i = 3
while i <= #ARGV do
  local count = tonumber(ARGV[i])
  local call = { ARGV[i + 1], KEYS[tonumber(ARGV[i + 2])] }
  for j = 3, count do
    call[j] = ARGV[i + j]
  end
  redis.pcall(unpack(call))
  i = i + count + 1
end
return 1
";

/// The script's answer when the record holds another owner's epoch.
pub(super) const REFUSED: i64 = 0;

/// The script's SHA-1, by which a round trip that loaded it first calls it.
pub(super) fn sha() -> String {
    sha1(SCRIPT)
}

/// A script's SHA-1, as EVALSHA names it.
pub(super) fn sha1(script: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, script.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// One of a session's keys, as the script numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SessionKey {
    Record = 1,
    Log = 2,
    Inflight = 3,
    Subs = 4,
}

impl SessionKey {
    pub(super) const ALL: [SessionKey; 4] = [
        SessionKey::Record,
        SessionKey::Log,
        SessionKey::Inflight,
        SessionKey::Subs,
    ];
}

/// The commands of one script run, as its arguments.
#[derive(Default, Debug)]
pub(super) struct Commands {
    args: Vec<Vec<u8>>,
}

impl Commands {
    /// Adds `name` on `key` with `args`.
    pub(super) fn push(
        &mut self,
        name: &str,
        key: SessionKey,
        args: impl IntoIterator<Item = Vec<u8>>,
    ) {
        let at = self.args.len();
        self.args.push(Vec::new());
        self.args.push(name.as_bytes().to_vec());
        self.args.push((key as u8).to_string().into_bytes());
        self.args.extend(args);
        let count = self.args.len() - at - 1;
        self.args[at] = count.to_string().into_bytes();
    }

    pub(super) fn is_empty(&self) -> bool {
        self.args.is_empty()
    }
}

/// One argument, as Redis gets it.
pub(super) fn arg(value: impl ToRedisArgs) -> Vec<u8> {
    value.to_redis_args().concat()
}

impl RedisStore {
    /// Adds to `pipe` the script run writing `commands` to session `id` of `server` if its
    /// record holds `epoch` (`whole_record`: the commands write it all, so it may be missing).
    /// Its answer is not ignored. The script must be loaded earlier in the round trip
    /// (`load_fenced`).
    pub(super) fn add_fenced(
        &self,
        pipe: &mut redis::Pipeline,
        (server, id): (&str, &str),
        epoch: u64,
        whole_record: bool,
        commands: &Commands,
    ) {
        let call = pipe
            .cmd("EVALSHA")
            .arg(&self.fenced_sha)
            .arg(SessionKey::ALL.len())
            .arg(self.session_key(server, id))
            .arg(self.log_key(server, id))
            .arg(self.inflight_key(server, id))
            .arg(self.subs_key(server, id))
            .arg(epoch)
            .arg(u8::from(whole_record));
        for arg in &commands.args {
            call.arg(arg.as_slice());
        }
    }

    /// Loads the script (a no-op when Redis has it; a restarted one has not), first in a round
    /// trip that runs it.
    pub(super) fn load_fenced(&self, pipe: &mut redis::Pipeline) {
        pipe.cmd("SCRIPT").arg("LOAD").arg(SCRIPT).ignore();
    }

    /// A round trip of its own writing `commands` to session `id` if its record holds
    /// `epoch`: answers the script's answer as the only element.
    pub(super) fn fenced_write(
        &self,
        server: &str,
        id: &str,
        epoch: u64,
        whole_record: bool,
        commands: &Commands,
    ) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        self.load_fenced(&mut pipe);
        self.add_fenced(&mut pipe, (server, id), epoch, whole_record, commands);
        pipe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_is_its_count_name_key_and_arguments() {
        let mut commands = Commands::default();
        commands.push("HSET", SessionKey::Record, [arg("owner"), arg("a")]);
        commands.push("DEL", SessionKey::Subs, []);
        let args: Vec<String> = commands
            .args
            .iter()
            .map(|a| String::from_utf8(a.clone()).unwrap())
            .collect();
        assert_eq!(args, ["4", "HSET", "1", "owner", "a", "2", "DEL", "4"]);
    }

    #[test]
    fn the_sha_is_the_scripts() {
        assert_eq!(sha().len(), 40);
        assert_ne!(
            sha(),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709",
            "not of nothing"
        );
    }
}
