from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from awa.contrib.django import enqueue

from .models import Order
from .tasks import SendConfirmation


@csrf_exempt  # an API endpoint of the example; keep CSRF on for forms
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    email = request.POST.get("email", "")
    if "@" not in email:
        return JsonResponse({"error": "email: must be an email address"}, status=400)
    with transaction.atomic():
        order = Order.objects.create(email=email)
        # Same transaction: if anything below fails, neither the order nor the job exists.
        job = enqueue(SendConfirmation(order_id=order.pk))
    return JsonResponse({"order": order.pk, "job": job.id}, status=201)


@require_GET
def order_status(request: HttpRequest, order_id: int) -> JsonResponse:
    order = get_object_or_404(Order, pk=order_id)
    sent = order.confirmation_sent_at
    return JsonResponse({"order": order.pk, "confirmation_sent": sent is not None})
