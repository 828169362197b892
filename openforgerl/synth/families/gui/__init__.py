"""The gui families: name -> where each is defined (imported only when used).

Each runs on one bundled web app (openforgerl/synth/bundled/gui/<app>/), named ``gui.<app>.<verb>``.
"""

_PACKAGE = "openforgerl.synth.families.gui"
TABLE: dict[str, str] = {
    "gui.todo.add": f"{_PACKAGE}.todo:AddItem",
    "gui.todo.complete": f"{_PACKAGE}.todo:CompleteItem",
    "gui.todo.rename": f"{_PACKAGE}.todo:RenameItem",
    "gui.todo.delete": f"{_PACKAGE}.todo:DeleteItem",
    "gui.todo.count": f"{_PACKAGE}.todo:CountItems",
    "gui.shop.buy": f"{_PACKAGE}.shop:BuyProducts",
    "gui.shop.price_extreme": f"{_PACKAGE}.shop:PriceExtreme",
    "gui.shop.cancel": f"{_PACKAGE}.shop:CancelOrder",
    "gui.booking.book": f"{_PACKAGE}.booking:BookSlot",
    "gui.booking.cancel": f"{_PACKAGE}.booking:CancelBooking",
    "gui.booking.reschedule": f"{_PACKAGE}.booking:RescheduleToFirstFree",
    "gui.booking.count_free": f"{_PACKAGE}.booking:CountFreeSlots",
    "gui.contacts.add": f"{_PACKAGE}.contacts:AddContact",
    "gui.contacts.edit": f"{_PACKAGE}.contacts:EditField",
    "gui.contacts.delete": f"{_PACKAGE}.contacts:DeleteContact",
    "gui.contacts.lookup": f"{_PACKAGE}.contacts:LookupField",
}
