"""The claw families: name -> where each is defined (imported only when used).

``home`` (a generated home directory under /app) has the file, config, log, vCard and iCalendar
families; ``office`` (a Maildir, the calendar service and work documents) has the mail and calendar
families.
"""

TABLE: dict[str, str] = {
    "claw.files.aggregate": "openforgerl.synth.families.claw.files:Aggregate",
    "claw.files.convert": "openforgerl.synth.families.claw.files:Convert",
    "claw.files.organize": "openforgerl.synth.families.claw.files:Organize",
    "claw.config.set_ini": "openforgerl.synth.families.claw.config:SetIni",
    "claw.config.set_json": "openforgerl.synth.families.claw.config:SetJson",
    "claw.logs.count": "openforgerl.synth.families.claw.records:CountLog",
    "claw.contacts.export": "openforgerl.synth.families.claw.records:ExportContacts",
    "claw.ics.agenda": "openforgerl.synth.families.claw.records:IcsAgenda",
    "claw.mail.send": "openforgerl.synth.families.claw.mail:SendFacts",
    "claw.mail.reply": "openforgerl.synth.families.claw.mail:Reply",
    "claw.mail.forward": "openforgerl.synth.families.claw.mail:Forward",
    "claw.calendar.create": "openforgerl.synth.families.claw.calendar:Create",
    "claw.calendar.move": "openforgerl.synth.families.claw.calendar:Move",
    "claw.calendar.delete": "openforgerl.synth.families.claw.calendar:Delete",
    "claw.calendar.schedule": "openforgerl.synth.families.claw.calendar:Schedule",
    "claw.office.accept_invite": "openforgerl.synth.families.claw.calendar:AcceptInvite",
}
