"""Mail families of the ``office`` asset: send facts from a document, reply to a message, forward one.

Every message is sent through the container's SMTP service and checked in the recipient's Maildir:
recipient, subject, sender, In-Reply-To where it applies, and body facts that are *derived* from the
workspace (a project's figures, the original message's text) while the instruction names their source.
Invariant: exactly one message may leave the owner's mailbox, so a wrong recipient, a second copy or a
mail to anyone else scores 0.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, ClassVar

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.claw.common import strongest
from openforgerl.synth.families.claw.office import (
    OWNER_ADDRESS,
    PROJECTS,
    SERVICES,
    Mail,
    by_mail_id,
    inbox,
    mail_check,
    projects,
    sent,
    solution,
    team,
)
from openforgerl.synth.family import Effect, Family, TaskDraft
from openforgerl.tasks import Domain

FACTS = {"budget_eur": "budget", "due": "due date", "status": "status", "code": "project code"}
PHRASES = ["Works for me, see you then.", "Thanks, I will take care of it.", "Approved, please go ahead.",
           "Let us discuss this at the next ops sync.", "Received, thank you for the update.",
           "Could you send me the details by email?"]


def subject_for(project: str, facts: list[str]) -> str:
    return f"{project}: " + " and ".join(FACTS[f] for f in facts)


class SendFacts(Family):
    """Email a colleague a project's figures, looked up in /app/docs/projects.json."""

    name = "claw.mail.send"
    domain: ClassVar[Domain] = "claw"
    description = "Send a colleague an email stating a project's figures from projects.json."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        project = rng.choice(sorted(projects(state)))
        facts = sorted(rng.sample(sorted(FACTS), rng.randint(1, 3)))
        return {"project": project, "to": rng.choice(sorted(team(state))), "facts": facts}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["project", "to", "facts"], "properties": {
            "project": {"enum": sorted(projects(state))}, "to": {"enum": sorted(team(state))},
            "facts": {"type": "array", "minItems": 1, "items": {"enum": sorted(FACTS)}}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("project") not in projects(state):
            return f"there is no project {params.get('project')!r} in {PROJECTS} (there are {sorted(projects(state))})"
        if params.get("to") not in team(state):
            return f"{params.get('to')!r} is not in the team directory"
        facts = params.get("facts")
        if not isinstance(facts, list) or not facts or any(f not in FACTS for f in facts) or len(set(facts)) < len(
                facts):
            return f"facts must be distinct keys among {sorted(FACTS)}"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        name, to, facts = params["project"], params["to"], sorted(params["facts"])
        everything = projects(state)
        values = [str(everything[name][f]) for f in facts]
        subject = subject_for(name, facts)
        keys = " and ".join(f"`{f}`" for f in facts)
        instruction = (
            f"Send one email from {OWNER_ADDRESS} to {to} with the subject `{subject}`. Its body must give project "
            f"{name}'s {keys} {'value' if len(facts) == 1 else 'values'} from {PROJECTS}, each written exactly as "
            f"it appears in that file. {SERVICES} Send no other mail.")
        body = "Hi,\n\n" + "".join(f"{f}: {v}\n" for f, v in zip(facts, values, strict=True)) + "\nAlex\n"
        someone_else = next(a for a in sorted(team(state)) if a != to)
        failures: dict[str, Effect] = {"wrong_recipient": sent(someone_else, subject, body),
                                       "sent_twice": sent(to, subject, body, copies=2)}
        if len(facts) > 1:
            failures["missing_fact"] = sent(to, subject, f"Hi,\n\n{facts[0]}: {values[0]}\n")
        other = next(p for n, p in sorted(everything.items()) if n != name)
        if all(str(other[f]) != v for f, v in zip(facts, values, strict=True)):
            failures["other_project"] = sent(to, subject, "".join(f"{f}: {other[f]}\n" for f in facts))
        code = f"""project = next(p for p in json.load(open({PROJECTS!r})) if p["name"] == {name!r})
lines = "".join(f"{{key}}: {{project[key]}}\\n" for key in {facts!r})
send({to!r}, {subject!r}, "Hi,\\n\\n" + lines + "\\nAlex\\n")
"""
        return TaskDraft(
            title=f"Email {to} the {name} {', '.join(FACTS[f] for f in facts)}", instruction=instruction,
            spec=mail_check(to, subject, values), solution=solution(code),
            required_literals=[OWNER_ADDRESS, to, f"`{subject}`", name, PROJECTS, *[f"`{f}`" for f in facts]],
            oracle=sent(to, subject, body),
            failure_cases=strongest(failures, "wrong_recipient", "missing_fact", "other_project", "sent_twice"),
            difficulty="medium",
            needed_actions=["read", "run"])


def mail_params_error(state: Path, message_id: Any) -> str | None:
    if by_mail_id(state, message_id) is None:
        ids = [m.message_id for m in inbox(state)][:5]
        return f"there is no message {message_id!r} in the mailbox (its Message-IDs look like {ids})"
    return None


def describe(mail: Mail) -> str:
    return f"the email from {mail.sender_name} <{mail.sender}> with the subject `{mail.subject}`"


class Reply(Family):
    """Reply to one message of the mailbox, threaded (In-Reply-To), with a given sentence."""

    name = "claw.mail.reply"
    domain: ClassVar[Domain] = "claw"
    description = "Reply to a message in /var/mail/alex with Re: subject, In-Reply-To and a given sentence."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"message": rng.choice(inbox(state)).message_id, "phrase": rng.choice(PHRASES)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["message", "phrase"], "properties": {
            "message": {"enum": [m.message_id for m in inbox(state)]},
            "phrase": {"type": "string", "minLength": 3, "maxLength": 80, "pattern": r"^[\w ,.!?'-]+$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        phrase = str(params.get("phrase", ""))
        if not 3 <= len(phrase.strip()) <= 80 or "\n" in phrase:
            return "the phrase must be one short sentence"
        return mail_params_error(state, params.get("message"))

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        mail = by_mail_id(state, params["message"])
        assert mail is not None
        phrase, subject = params["phrase"].strip(), f"Re: {mail.subject}"
        instruction = (
            f"Reply to {describe(mail)} in your mailbox (the Maildir /var/mail/alex; you are Alex Morgan, "
            f"{OWNER_ADDRESS}). Send the reply from {OWNER_ADDRESS} to {mail.sender} only, with the subject "
            f"`{subject}`, an In-Reply-To header holding that email's Message-ID (angle brackets included), and a "
            f"body that contains the sentence `{phrase}`. {SERVICES} Send no other mail.")
        body = f"{phrase}\n\nAlex\n"
        others = [m for m in inbox(state) if m.message_id != mail.message_id]
        wrong = next((m for m in others if m.sender == mail.sender), others[0])
        someone_else = next(a for a in sorted(team(state)) if a != mail.sender)
        failures: dict[str, Effect] = {
            "not_threaded": sent(mail.sender, subject, body),
            "wrong_message": sent(wrong.sender, f"Re: {wrong.subject}", body, in_reply_to=wrong.message_id),
            "without_sentence": sent(mail.sender, subject, "Thanks.\n", in_reply_to=mail.message_id),
            "wrong_recipient": sent(someone_else, subject, body, in_reply_to=mail.message_id)}
        code = f"""original = next(m for m in inbox() if str(m["Subject"]) == {mail.subject!r})
send({mail.sender!r}, "Re: " + str(original["Subject"]), {body!r}, in_reply_to=str(original["Message-ID"]))
"""
        return TaskDraft(
            title=f"Reply to {mail.subject!r}", instruction=instruction,
            spec=mail_check(mail.sender, subject, [phrase], in_reply_to=mail.message_id), solution=solution(code),
            required_literals=[OWNER_ADDRESS, mail.sender, f"`{mail.subject}`", f"`{subject}`", f"`{phrase}`"],
            oracle=sent(mail.sender, subject, body, in_reply_to=mail.message_id),
            failure_cases=strongest(failures, "wrong_message", "not_threaded", "without_sentence", "wrong_recipient"),
            difficulty="medium", needed_actions=["read", "search", "run"])


def quote_line(mail: Mail) -> str:
    """The line of a message's text that a forward must carry (its longest)."""
    return max((line.strip() for line in mail.body.splitlines()), key=lambda line: (len(line), line))


class Forward(Family):
    """Forward one message of the mailbox to a colleague, with its text."""

    name = "claw.mail.forward"
    domain: ClassVar[Domain] = "claw"
    description = "Forward a message in /var/mail/alex to a colleague (Fwd: subject, original text quoted)."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        mail = rng.choice(inbox(state))
        return {"message": mail.message_id, "to": rng.choice([a for a in sorted(team(state)) if a != mail.sender])}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["message", "to"], "properties": {
            "message": {"enum": [m.message_id for m in inbox(state)]}, "to": {"enum": sorted(team(state))}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        problem = mail_params_error(state, params.get("message"))
        if problem:
            return problem
        mail = by_mail_id(state, params["message"])
        if params.get("to") not in team(state) or (mail is not None and params["to"] == mail.sender):
            return f"{params.get('to')!r} must be a colleague from the team directory other than the sender"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        mail, to = by_mail_id(state, params["message"]), params["to"]
        assert mail is not None
        subject, line = f"Fwd: {mail.subject}", quote_line(mail)
        instruction = (
            f"Forward {describe(mail)}, which is in your mailbox (the Maildir /var/mail/alex; you are Alex Morgan, "
            f"{OWNER_ADDRESS}), to {to}: send it from {OWNER_ADDRESS} to {to} only, with the subject `{subject}` "
            f"and the original email's text copied into the body. {SERVICES} Send no other mail.")
        body = f"FYI, see below.\n\n---------- Forwarded message ----------\n{mail.body}"
        others = [m for m in inbox(state) if m.message_id != mail.message_id and quote_line(m) != line]
        someone_else = next(a for a in sorted(team(state)) if a not in (to, mail.sender))
        failures: dict[str, Effect] = {
            "wrong_message": sent(to, subject, f"FYI\n\n{others[0].body}"),
            "wrong_recipient": sent(someone_else, subject, body),
            "text_left_out": sent(to, subject, "FYI, see the message below.\n")}
        code = f"""original = next(m for m in inbox() if str(m["Subject"]) == {mail.subject!r})
text = original.get_body(("plain",)).get_content()
send({to!r}, "Fwd: " + str(original["Subject"]), "FYI, see below.\\n\\n---------- Forwarded message ----------\\n"
     + text)
"""
        return TaskDraft(
            title=f"Forward {mail.subject!r} to {to}", instruction=instruction,
            spec=mail_check(to, subject, [line]), solution=solution(code),
            required_literals=[OWNER_ADDRESS, to, mail.sender, f"`{mail.subject}`", f"`{subject}`"],
            oracle=sent(to, subject, body),
            failure_cases=strongest(failures, "wrong_message", "wrong_recipient", "text_left_out"),
            difficulty="easy",
            needed_actions=["read", "search", "run"])
