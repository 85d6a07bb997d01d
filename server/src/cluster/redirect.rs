//! A batch's commands that met `MOVED` or `ASK` on a Redis Cluster (a
//! slot that moved or is moving: a resharding, a failover), sent again
//! where the slot is now, before the batch's barriers answer.
//!
//! The outbound thread sends a batch as one pipeline per shard, and Redis
//! answers each command of a pipeline on its own: while a slot migrates,
//! the commands for a key already moved are answered `ASK` and not run,
//! while the others are. So each part keeps its runs of commands that
//! stand or fall together ([`Group`]: a batch command's, a bundle's, a
//! queue's settlements, each for one slot). A group whose answers hold a
//! redirection, and nothing else refused, goes again, whole, to the node
//! named: after `ASKING` for an `ASK` (before each command, or once
//! before a transaction's `MULTI`, which keeps it until `EXEC`), to the
//! slot's primary read anew for a `MOVED`. The group's batch commands then
//! count the new part as well as the old one, with the new part's `WAIT`;
//! the old part's other commands ran, and stand.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::{Cmd, ErrorKind, Pipeline, RedisError, Value};

use super::outbound::{Answers, Asked, Group, NotSent, Part, REPLICA_WAIT};
use super::shards::{Redis, REDIRECTS};

/// Where a group is to go again.
enum Redirect {
    /// To the slot's primary, once the slots are read again.
    Moved,
    /// Once, to the node that imports the slot, after `ASKING`.
    Ask(String),
}

/// Sends `asked`'s parts and reads every answer, sending again what met a
/// redirection (up to [`REDIRECTS`] times); the parts made for that are
/// added to `asked`, and the commands sent again placed in them. Returns
/// per part its last `keep` answers (one more for the part that reads the
/// epoch), or why it failed.
pub(super) fn send(
    redis: &mut Redis,
    asked: &mut Asked,
    (keep, min_replicas): (usize, u32),
    redirected: &AtomicU64,
) -> Answers {
    let plan: Vec<(usize, &Pipeline)> = asked.parts.iter().map(|p| (p.shard, &p.pipe)).collect();
    let mut answers = redis.each_answer_on(&plan);
    let mut first = 0;
    for round in 0..=REDIRECTS {
        // (part, group, where to) of what goes again.
        let mut again: Vec<(usize, usize, Redirect)> = Vec::new();
        for (p, (answer, _)) in answers.iter_mut().enumerate().skip(first) {
            let Ok(all) = answer else { continue };
            match redirections(&asked.parts[p], all) {
                Err(e) => *answer = Err(e),
                Ok(redirected) => {
                    let kept = keep + usize::from(asked.epoch == Some(p));
                    all.drain(..all.len().saturating_sub(kept));
                    for (g, to) in redirected {
                        if round < REDIRECTS {
                            again.push((p, g, to));
                            continue;
                        }
                        let commands = asked.parts[p].groups[g].commands.clone();
                        fail(asked, &commands, &NotSent::Redirected);
                    }
                }
            }
        }
        if again.is_empty() {
            break;
        }
        if again.iter().any(|(_, _, to)| matches!(to, Redirect::Moved)) {
            if let Err(e) = redis.refresh() {
                log::debug!("cluster: the slots were not read again: {e}");
            }
        }
        redirected.fetch_add(again.len() as u64, Ordering::Relaxed);
        let made = asked.parts.len();
        let mut of_shard: HashMap<usize, usize> = HashMap::new();
        for (p, g, to) in again {
            let key = asked.parts[p].groups[g].key.clone();
            let target = match &to {
                Redirect::Ask(addr) => redis
                    .shard_at(addr)
                    .ok_or_else(|| NotSent::UnknownNode(addr.clone())),
                Redirect::Moved => redis.shard_of(&key).map_err(|_| NotSent::Uncovered {
                    slot: super::slots::key_slot(key.as_bytes()),
                    key: key.clone(),
                }),
            };
            let shard = match target {
                Ok(shard) => shard,
                Err(why) => {
                    let commands = asked.parts[p].groups[g].commands.clone();
                    fail(asked, &commands, &why);
                    continue;
                }
            };
            let q = *of_shard.entry(shard).or_insert_with(|| {
                asked.parts.push(Part {
                    shard,
                    pipe: redis::pipe(),
                    groups: Vec::new(),
                });
                asked.parts.len() - 1
            });
            // The new part comes after every old one.
            let (before, after) = asked.parts.split_at_mut(q);
            let (old, new) = (&before[p], &mut after[0]);
            let group = &old.groups[g];
            let start = new.pipe.len();
            let asking = matches!(to, Redirect::Ask(_));
            let whole = transaction(old, group);
            if asking && whole {
                new.pipe.cmd("ASKING");
            }
            for cmd in old
                .pipe
                .cmd_iter()
                .take(group.range.end)
                .skip(group.range.start)
            {
                if named(cmd, b"ASKING") {
                    continue;
                }
                if asking && !whole {
                    new.pipe.cmd("ASKING");
                }
                new.pipe.add_command(cmd.clone());
            }
            new.groups.push(Group {
                commands: group.commands.clone(),
                range: start..new.pipe.len(),
                key,
            });
            // Placed in the new part too. The old one stays: another of
            // its groups may hold more of the same command (a commit over
            // two slots of one shard), whose write its WAIT must confirm.
            for &c in &group.commands {
                if let Ok(placed) = &mut asked.placed[c] {
                    if !placed.contains(&q) {
                        placed.push(q);
                    }
                }
            }
        }
        if keep > 0 {
            for part in &mut asked.parts[made..] {
                part.pipe
                    .cmd("WAIT")
                    .arg(min_replicas)
                    .arg(REPLICA_WAIT.as_millis() as u64);
            }
        }
        let plan: Vec<(usize, &Pipeline)> = asked.parts[made..]
            .iter()
            .map(|p| (p.shard, &p.pipe))
            .collect();
        first = answers.len();
        answers.extend(redis.each_answer_on(&plan));
    }
    answers
}

/// The groups of `part` that met a redirection, and where each goes; an
/// error if Redis refused anything else (the part fails, as a part whose
/// answers hold a refusal does).
fn redirections(part: &Part, answers: &[Value]) -> Result<Vec<(usize, Redirect)>, RedisError> {
    let mut redirected: Vec<(usize, Redirect)> = Vec::new();
    for (j, answer) in answers.iter().enumerate() {
        let Value::ServerError(e) = answer else {
            continue;
        };
        let e = RedisError::from(e.clone());
        let group = part.groups.iter().position(|g| g.range.contains(&j));
        let to = match (e.kind(), e.redirect_node()) {
            (ErrorKind::Moved, _) => Redirect::Moved,
            (ErrorKind::Ask, Some((addr, _))) => Redirect::Ask(addr.to_owned()),
            // A transaction whose command met a redirection is discarded
            // whole: the redirection says where it goes.
            _ if e.code() == Some("EXECABORT") && group.is_some() => continue,
            _ => return Err(e),
        };
        let Some(g) = group else {
            return Err(e);
        };
        if !redirected.iter().any(|(seen, _)| *seen == g) {
            redirected.push((g, to));
        }
    }
    Ok(redirected)
}

/// Whether `group` of `part` is a transaction (MULTI ... EXEC).
fn transaction(part: &Part, group: &Group) -> bool {
    part.pipe
        .cmd_iter()
        .take(group.range.end)
        .skip(group.range.start)
        .find(|cmd| !named(cmd, b"ASKING"))
        .is_some_and(|cmd| named(cmd, b"MULTI"))
}

/// Whether `cmd` is the command `name`.
fn named(cmd: &Cmd, name: &[u8]) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(n)) if n.eq_ignore_ascii_case(name))
}

/// Fails batch commands `commands`: they did not run, and are not sent
/// again.
fn fail(asked: &mut Asked, commands: &[usize], why: &NotSent) {
    for &c in commands {
        asked.placed[c] = Err(why.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(resp: &str) -> Value {
        redis::parse_redis_value(resp.as_bytes()).unwrap()
    }

    /// A part of an append (group 0), a transaction (group 1) and a WAIT.
    fn part() -> Part {
        let mut pipe = redis::pipe();
        pipe.cmd("XADD")
            .arg("herald:q:{a}")
            .arg("*")
            .arg("m")
            .arg("x");
        pipe.cmd("MULTI");
        pipe.cmd("XADD")
            .arg("herald:q:{b}")
            .arg("*")
            .arg("m")
            .arg("y");
        pipe.cmd("EXEC");
        pipe.cmd("WAIT").arg(1).arg(2000);
        let group = |commands, range, key: &str| Group {
            commands,
            range,
            key: key.into(),
        };
        Part {
            shard: 0,
            pipe,
            groups: vec![
                group(vec![0], 0..1, "herald:q:{a}"),
                group(vec![1], 1..4, "herald:q:{b}"),
            ],
        }
    }

    #[test]
    fn redirections_are_told_per_group_and_anything_else_fails_the_part() {
        let part = part();
        let ok = [
            answer("$3\r\n1-0\r\n"),
            answer("+OK\r\n"),
            answer("+QUEUED\r\n"),
            answer("*1\r\n$3\r\n2-0\r\n"),
            answer(":1\r\n"),
        ];
        assert!(redirections(&part, &ok).unwrap().is_empty());

        let mut asked = ok.clone();
        asked[0] = answer("-ASK 3999 127.0.0.1:7002\r\n");
        asked[2] = answer("-MOVED 1234 127.0.0.1:7003\r\n");
        asked[3] = answer("-EXECABORT Transaction discarded because of previous errors.\r\n");
        let found = redirections(&part, &asked).unwrap();
        assert!(
            matches!(&found[..], [(0, Redirect::Ask(a)), (1, Redirect::Moved)] if a == "127.0.0.1:7002")
        );
        assert!(transaction(&part, &part.groups[1]) && !transaction(&part, &part.groups[0]));

        // A refusal of another kind, or a redirection outside any group.
        let mut refused = ok.clone();
        refused[0] = answer("-OOM command not allowed\r\n");
        assert!(redirections(&part, &refused).is_err());
        let mut outside = ok;
        outside[4] = answer("-MOVED 1 127.0.0.1:7003\r\n");
        assert!(redirections(&part, &outside).is_err());
    }
}
