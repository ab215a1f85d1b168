"""Typical raw payloads of each source, shared by the adapter tests."""

ORDER = {
    "op": "c",
    "order_id": "1001",
    "user_id": "u1",
    "amount": "99.00",
    "status": "created",
    "address": "Chaoyang",
    "updated_at": "2024-06-01 12:00:00",
}
PAYMENT = {"payId": "P1", "orderId": "1001", "payMoney": 9900, "paidAt": 1717214400123}
LOGISTICS = {"trackingNo": "SF1", "order": "1001", "state": "in_transit", "ts": "2024-06-01T12:30:00+08:00"}
BEHAVIOUR = {"uid": "u1", "event": "view", "orderId": "1001", "ts": 1717214400000}
